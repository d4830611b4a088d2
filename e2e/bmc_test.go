package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/bmc/bmcsim"
)

// bmcView is the part of `swarmctl --json bmc` the test reads.
type bmcView struct {
	Authority *struct {
		Signer string `json:"signer"`
		AgeMS  int64  `json:"age_ms"`
		Boot   uint32 `json:"boot"`
		Nodes  []struct {
			PeerID string `json:"peer_id"`
			Alive  bool   `json:"alive"`
			AgeMS  int64  `json:"age_ms"`
		} `json:"nodes"`
	} `json:"authority"`
	Bridge *struct {
		Connected bool    `json:"connected"`
		RTTMS     float64 `json:"rtt_ms"`
	} `json:"bridge"`
}

// nodeAlive reports whether the authoritative table lists id, and alive.
func (v bmcView) nodeAlive(id string) (alive, listed bool) {
	if v.Authority == nil {
		return false, false
	}
	for _, n := range v.Authority.Nodes {
		if n.PeerID == id {
			return n.Alive, true
		}
	}
	return false, false
}

// TestBMCDeclaresKilledStageDead: a bridge daemon on an emulated Uno and
// three daemons that accept its tables. A kill -9'd daemon is declared dead
// by the board's own clock within 7 s, and `swarmctl bmc` shows it.
//
// The bridge tracks every peer alive on gossip, so the test does not need
// the daemons to load shards.
func TestBMCDeclaresKilledStageDead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	board, err := bmcsim.Start(ctx, t.TempDir())
	if errors.Is(err, bmcsim.ErrToolsMissing) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { board.Close() })

	bridge := startDaemon(t, "", "--no-mdns", "--threads", "1", "--bmc-serial", board.Path())
	bridgeID, boot := bridge.peerID(), bridge.bootstrapAddr()
	var ds []*daemon
	ids := []string{bridgeID}
	for i := 0; i < 3; i++ {
		d := startDaemon(t, "", "--no-mdns", "--threads", "1", "--bootstrap", boot, "--bmc-peer", bridgeID)
		ds = append(ds, d)
		ids = append(ids, d.peerID())
	}
	observer, victim := ds[0], ds[2]
	victimID := ids[3]
	view := func(d *daemon) bmcView {
		var v bmcView
		d.ctlJSON(&v, "bmc")
		return v
	}
	took := eventually(t, 30*time.Second, "every daemon alive in the bridge's table", func() bool {
		v := view(observer)
		if v.Authority == nil || v.Authority.Signer != bridgeID {
			return false
		}
		for _, id := range ids {
			if alive, _ := v.nodeAlive(id); !alive {
				return false
			}
		}
		return true
	})
	t.Logf("the bridge's table lists 4 live daemons %s after they started", took)
	if v := view(bridge); v.Bridge == nil || !v.Bridge.Connected {
		t.Fatalf("bridge not connected: %+v", v.Bridge)
	} else {
		t.Logf("bridge PING round trip %.2f ms", v.Bridge.RTTMS)
	}

	victim.kill()
	took = eventually(t, 15*time.Second, "the BMC declares the killed daemon dead", func() bool {
		alive, listed := view(observer).nodeAlive(victimID)
		return listed && !alive
	})
	gossipAlive := observer.peers()[victimID]
	t.Logf("BMC declared the kill -9'd daemon dead %s after the kill, as seen by another daemon's swarmctl (gossip still alive: %v)",
		took.Round(10*time.Millisecond), gossipAlive)

	out, errOut, code := observer.ctl("bmc")
	if code != 0 {
		t.Fatalf("swarmctl bmc: exit %d: %s", code, errOut)
	}
	short := victimID[len(victimID)-10:]
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, short) && !strings.HasPrefix(l, victimID) {
			row = l
		}
	}
	if !strings.Contains(row, "DEAD") || !strings.Contains(out, "authority "+bridgeID) {
		t.Fatalf("swarmctl bmc does not show %s dead under %s:\n%s", victimID, bridgeID, out)
	}
	t.Logf("swarmctl bmc:\n%s", out)
}
