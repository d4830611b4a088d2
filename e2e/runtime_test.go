package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRoleAtRunTime: swarmctl adds a role to a running swarmd, which
// then answers as it and lists it in ps; swarmctl removes it, and ps is
// empty again; the same for a shard, through which a pipeline answers;
// bad uses are usage errors (exit 2).
func TestRoleAtRunTime(t *testing.T) {
	model := synthModel(t, "qwen3", "tiny", "q8_0")
	d := startDaemon(t, "", "--no-mdns", "--threads", "1")
	if out, errb, code := d.ctl("role", "add", "reasoner", model); code != 0 || !strings.Contains(out, "serving reasoner") {
		t.Fatalf("role add: exit %d\n%s%s", code, out, errb)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, errb, code := d.ctl("ask", "--mode", "speed", "--max-tokens", "3", "hello")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ask after role add: exit %d\n%s%s", code, out, errb)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, _, code := d.ctl("ps"); code != 0 || !strings.Contains(out, "reasoner") || !strings.Contains(out, "role") {
		t.Fatalf("ps after role add: exit %d\n%s", code, out)
	}
	if out, errb, code := d.ctl("role", "rm", "reasoner"); code != 0 || !strings.Contains(out, "no longer serving reasoner") {
		t.Fatalf("role rm: exit %d\n%s%s", code, out, errb)
	}
	if out, _, code := d.ctl("ps"); code != 0 || !strings.Contains(out, "no model loaded") {
		t.Fatalf("ps after role rm: exit %d\n%s", code, out)
	}
	out, errb, code := d.ctl("shard", "add", model+":0-4")
	if code != 0 || !strings.Contains(out, "serving layers [0,4)") {
		t.Fatalf("shard add: exit %d\n%s%s", code, out, errb)
	}
	var ps struct {
		Models []struct {
			Kind     string `json:"kind"`
			ModelCID string `json:"model_cid"`
		} `json:"models"`
	}
	d.ctlJSON(&ps, "ps")
	if len(ps.Models) != 1 || ps.Models[0].Kind != "shard" {
		t.Fatalf("ps after shard add: %+v", ps)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, errb, code := d.ctl("ask", "--mode", "pipeline", "--max-tokens", "3", "hello")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pipeline after shard add: exit %d\n%s%s", code, out, errb)
		}
	}
	if out, errb, code := d.ctl("shard", "rm", ps.Models[0].ModelCID+":0-4"); code != 0 || !strings.Contains(out, "no longer serving") {
		t.Fatalf("shard rm: exit %d\n%s%s", code, out, errb)
	}
	for _, bad := range [][]string{{"role"}, {"role", "add", "writer"}, {"role", "del", "writer"},
		{"shard", "add"}, {"shard", "rm", "x:2-1"}, {"shard", "move", "x:0-2"}} {
		if _, errb, code := d.ctl(bad...); code != 2 {
			t.Errorf("swarmctl %v: exit %d, want 2 (usage)\n%s", bad, code, errb)
		}
	}
	if _, errb, code := d.ctl("role", "rm", "critic"); code != 1 || !strings.Contains(errb, "not served") {
		t.Errorf("role rm of a role not served: exit %d\n%s", code, errb)
	}
}

// TestReloadOnSIGHUP: swarmd re-reads its config file on SIGHUP and
// applies its roles and shards: a role and a shard written into the file
// are served, then taken out of it, no longer; a key that needs a
// restart is reported, not applied.
func TestReloadOnSIGHUP(t *testing.T) {
	model := synthModel(t, "qwen3", "tiny", "q8_0")
	conf := filepath.Join(t.TempDir(), "swarm.json")
	write := func(s string) {
		if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{}`)
	d := startDaemon(t, "", "--no-mdns", "--threads", "1", "--config", conf)
	loaded := func() []string {
		var ps struct {
			Models []struct {
				Kind  string   `json:"kind"`
				Roles []string `json:"roles"`
			} `json:"models"`
		}
		d.ctlJSON(&ps, "ps")
		var out []string
		for _, m := range ps.Models {
			out = append(out, m.Kind+strings.Join(m.Roles, ","))
		}
		slices.Sort(out)
		return out
	}
	hup := func(want []string) {
		t.Helper()
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for !slices.Equal(loaded(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("after SIGHUP: loaded %v, want %v\n%s", loaded(), want, tail(d.log.String(), 20))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	write(fmt.Sprintf(`{"roles": {"reasoner": %q}, "shards": [%q]}`, model, model+":0-4"))
	hup([]string{"rolereasoner", "shard"})
	write(`{"heartbeat": "3s"}`)
	hup(nil)
	if !strings.Contains(d.log.String(), "need a restart, not applied: [heartbeat]") {
		t.Errorf("a changed heartbeat was not reported as needing a restart:\n%s", tail(d.log.String(), 20))
	}
}
