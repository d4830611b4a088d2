package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJoinByInvite: fresh daemons in a network namespace of their own,
// mDNS on, each make a private swarm: c, started with --join and a's
// token, is a member of a's swarm, while b, in the same namespace all
// along, never shows in their tables nor they in its. Bad tokens are
// refused by swarmd --join and swarmctl join, naming the problem. Then
// swarmctl join on the running b: b restarts its network with a's key
// (the old one kept), on the same API address, and sees a and its role;
// it serves the role and shard added to it at run time, and a's question
// to that role is answered.
func TestJoinByInvite(t *testing.T) {
	ns := newNetns(t)
	model := archModel(t, "qwen3")
	a := startFreshDaemon(t, ns, "--threads", "1", "--role", "writer="+model)
	b := startFreshDaemon(t, ns)
	tok, errOut, code := a.ctl("invite")
	tok = strings.TrimSpace(tok)
	if code != 0 || !strings.HasPrefix(tok, "swarm1-") || !strings.Contains(errOut, "swarmd --join") {
		t.Fatalf("swarmctl invite: exit %d, %q, %q", code, tok, errOut)
	}
	t.Logf("swarmctl invite: a %d-character token", len(tok))

	c := startFreshDaemon(t, ns, "--join", tok)
	aID, bID, cID := a.peerID(), b.peerID(), c.peerID()
	took := eventually(t, 30*time.Second, "c, started with --join, and a see each other", func() bool {
		return a.peers()[cID] && c.peers()[aID]
	})
	t.Logf("a peer started with --join was in the swarm %s after its API answered", took)
	for name, d := range map[string]*daemon{"a": a, "c": c} {
		if _, ok := d.peers()[bID]; ok {
			t.Fatalf("%s lists b, a peer of another swarm", name)
		}
	}
	if ps := b.peers(); len(ps) != 1 {
		t.Fatalf("b, a swarm of its own, lists %v", ps)
	}

	// Bad tokens.
	if out, code := runSwarmd(t, "--data", t.TempDir(), "--api", "off", "--join", tok[:60]); code != 2 || !strings.Contains(out, "cut short") {
		t.Fatalf("swarmd --join with a truncated token: exit %d\n%s", code, out)
	}
	if _, errOut, code := b.ctl("join", "swarm1-"+strings.Repeat("a", 8)); code != 1 || !strings.Contains(errOut, "bad join token") {
		t.Fatalf("swarmctl join with a bad token: exit %d, %s", code, errOut)
	}
	if _, errOut, code := b.ctl("join"); code != 2 || !strings.Contains(errOut, "one argument") {
		t.Fatalf("swarmctl join without a token: exit %d, %s", code, errOut)
	}

	// swarmctl join on the running b, which serves a role and a shard added
	// at run time: it serves them after the join too.
	if out, errb, code := b.ctl("role", "add", "critic", model); code != 0 {
		t.Fatalf("role add on b: exit %d\n%s%s", code, out, errb)
	}
	if out, errb, code := b.ctl("shard", "add", model+":0-2"); code != 0 {
		t.Fatalf("shard add on b: exit %d\n%s%s", code, out, errb)
	}
	oldKey, _ := os.ReadFile(filepath.Join(b.dir, "swarm.key"))
	out, errOut, code := b.ctl("join", tok)
	if code != 0 || !strings.Contains(out, "joined swarm") || !strings.Contains(out, "left swarm") {
		t.Fatalf("swarmctl join: exit %d, %s %s", code, out, errOut)
	}
	if kept, _ := os.ReadFile(filepath.Join(b.dir, "swarm.key.old")); string(kept) != string(oldKey) {
		t.Fatal("the replaced key was not kept as swarm.key.old")
	}
	if !strings.Contains(b.log.String(), "previous_swarm=") {
		t.Fatal("the key replacement was not logged with both swarm IDs")
	}
	eventually(t, 30*time.Second, "b, joined, sees a and its writer", func() bool {
		return b.peers()[aID] && b.roles()["writer"] == 1
	})
	if b.peerID() != bID {
		t.Fatal("b changed its identity joining")
	}
	var ps struct {
		Models []struct {
			Kind  string   `json:"kind"`
			Roles []string `json:"roles"`
			Start int      `json:"start"`
			End   int      `json:"end"`
		} `json:"models"`
	}
	// The restarted peer loads them in the background, as those of its config.
	eventually(t, 30*time.Second, "b, joined, serves the role and shard added at run time", func() bool {
		b.ctlJSON(&ps, "ps")
		var critic, shard bool
		for _, m := range ps.Models {
			critic = critic || m.Kind == "role" && strings.Join(m.Roles, ",") == "critic"
			shard = shard || m.Kind == "shard" && m.Start == 0 && m.End == 2
		}
		return critic && shard
	})
	eventually(t, 30*time.Second, "a sees b's critic and asks it", func() bool {
		if a.roles()["critic"] != 1 {
			return false
		}
		_, _, code := a.ctl("ask", "--mode", "critic", "--max-tokens", "3", "hello")
		return code == 0
	})
}

// TestJoinDataDirInUse: swarmd --join pointed at the data dir of a
// running daemon fails as any second daemon on it does, and changes
// nothing there: the running daemon keeps its key and its peers.
func TestJoinDataDirInUse(t *testing.T) {
	first := startFreshDaemon(t, "", "--no-mdns")
	other := startFreshDaemon(t, "", "--no-mdns")
	tok, errOut, code := other.ctl("invite")
	if code != 0 {
		t.Fatalf("swarmctl invite: exit %d: %s", code, errOut)
	}
	keyFile := filepath.Join(first.dir, "swarm.key")
	before, _ := os.ReadFile(keyFile)
	out, code := runSwarmd(t, "--data", first.dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--no-mdns",
		"--join", strings.TrimSpace(tok))
	want := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	if code != 1 || !strings.Contains(out, "data dir in use") || !strings.Contains(out, want) {
		t.Fatalf("swarmd --join on a dir in use: exit %d, want 1 and an error naming %q:\n%s", code, want, out)
	}
	if after, err := os.ReadFile(keyFile); err != nil || string(after) != string(before) {
		t.Fatal("swarmd --join refused for a dir in use changed the running daemon's swarm key")
	}
	for _, f := range []string{"swarm.key.old", "joined.peers"} {
		if _, err := os.Stat(filepath.Join(first.dir, f)); err == nil {
			t.Fatalf("swarmd --join refused for a dir in use wrote %s", f)
		}
	}
	if _, errOut, code := first.ctl("status"); code != 0 {
		t.Fatalf("first daemon after the refusal: exit %d: %s", code, errOut)
	}
}
