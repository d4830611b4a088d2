package node

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/shards"
)

// engineOptions are the engine settings of every model this peer loads.
func (n *Node) engineOptions() engine.Options {
	return engine.Options{Threads: n.cfg.Engine.Threads, Slots: n.cfg.Engine.Slots, Queue: n.cfg.Engine.Queue,
		Context: n.cfg.Engine.Context, Logger: n.log}
}

// startMoA registers the MoA protocol, loads the configured role models and
// builds this peer's originator.
func (n *Node) startMoA(ctx context.Context) error {
	n.moaServer = moa.NewServer(n.host, n.log)
	n.moaServer.Status = func() (string, int) {
		thermal, bat := n.readPower()
		if bat == nil {
			return thermal, 0
		}
		return thermal, bat.Percent
	}
	n.moaServer.Refuse = n.refusing
	roles := make([]string, 0, len(n.cfg.Roles))
	for r := range n.cfg.Roles {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	loaded := map[string]*moa.RoleModel{} // by path: a file given for several roles loads once
	for _, role := range roles {
		path := n.cfg.Roles[role]
		start := time.Now()
		var rm *moa.RoleModel
		var err error
		if first := loaded[path]; first != nil {
			rm, err = first.As(role)
		} else {
			// Registered in the store: named by its root (built once, kept
			// while the file is unchanged), and served to peers who check it.
			var me shards.ModelEntry
			if me, err = n.pipe.store.AddModel(path); err != nil {
				return fmt.Errorf("role %s: %w", role, err)
			}
			var reserved int64
			if reserved, err = n.mem.reserve("role "+role+" ("+path+")", path, n.engineOptions()); err != nil {
				return err
			}
			if rm, err = moa.LoadRoleNamed(ctx, role, path, me.CID, n.engineOptions()); err != nil {
				n.mem.release(reserved)
			}
			loaded[path] = rm
		}
		if err != nil {
			return fmt.Errorf("role %s: %w", role, err)
		}
		n.moaServer.Add(rm)
		n.log.Info("serving role", "role", role, "model", rm.Name, "cid", rm.CID, "quant", rm.Quant,
			"tok_s", fmt.Sprintf("%.1f", rm.TokPerSec), "load_time", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// originator is this peer's MoA originator (built after the swarm view).
func (n *Node) newOriginator() *moa.Originator {
	return &moa.Originator{
		Host: n.host, View: n.swarm.View(), Local: n.moaServer, Log: n.log, Exclude: n.excluded,
		Timeouts: moa.Timeouts{Simple: time.Duration(n.cfg.MoA.SimpleTimeout),
			Complex: time.Duration(n.cfg.MoA.ComplexTimeout), Speed: time.Duration(n.cfg.MoA.SpeedTimeout)},
		Progress: n.cfg.Progress.swarm(),
		ConnKind: n.connKind,
	}
}

// excluded reports peers that routing must avoid: those the authoritative
// BMC table declares dead, even while gossip still shows them.
func (n *Node) excluded(id peer.ID) bool {
	if f := n.bmcDead.Load(); f != nil {
		return (*f)(id)
	}
	return false
}
