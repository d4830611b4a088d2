package mobile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
)

// TestInviteJoin: a phone started fresh is a private swarm of its own (a
// key created in its data dir) with an invitation to give; a bad token is
// refused naming the problem; Join with a member's token restarts the
// phone's peer in place, which then sees the swarm's role and answers.
func TestInviteJoin(t *testing.T) {
	role := rolePeer(t)
	dir := t.TempDir()
	phone, err := Start(phoneJSON(t), dir, nil) // no key: a fresh install
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { phone.Stop() })
	if _, err := os.Stat(filepath.Join(dir, node.SwarmKeyFile)); err != nil {
		t.Fatalf("a fresh phone has no swarm key: %v", err)
	}
	var inv client.Invite
	js, err := phone.Invite()
	if err != nil || json.Unmarshal([]byte(js), &inv) != nil || !strings.HasPrefix(inv.Token, node.InvitePrefix) {
		t.Fatalf("Invite: %s, %v", js, err)
	}
	if _, err := node.ParseInvite(inv.Token); err != nil {
		t.Fatalf("the phone's token: %v", err)
	}

	member, err := role.Invite()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := phone.Join(member.Token[:40]); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("Join with a truncated token: %v", err)
	}
	js, err = phone.Join(member.Token)
	var j client.Joined
	if err != nil || json.Unmarshal([]byte(js), &j) != nil || !j.Restarting || j.SwarmID != member.SwarmID || j.Previous != inv.SwarmID {
		t.Fatalf("Join: %s, %v", js, err)
	}
	var id client.ID
	if js, err := phone.Identity(); err != nil || json.Unmarshal([]byte(js), &id) != nil || id.SwarmID != member.SwarmID {
		t.Fatalf("after Join the phone is in swarm %q (%v), want %s", id.SwarmID, err, member.SwarmID)
	}
	seesRole(t, phone, role.ID().String(), "reasoner")
	rec := newRecorder(t)
	req, err := phone.Ask(`{"query":"hi","mode":"reasoner","max_tokens":3}`, rec)
	if err != nil {
		t.Fatal(err)
	}
	req.WaitDone()
	if rec.result == "" {
		t.Fatalf("the joined phone's question: %s %s", rec.kind, rec.message)
	}
}
