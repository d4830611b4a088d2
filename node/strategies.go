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
	for _, role := range roles {
		rm, err := n.loadRole(ctx, role, n.cfg.Roles[role])
		if err != nil {
			return err
		}
		n.moaServer.Add(rm)
	}
	return nil
}

// loadRole loads the GGUF at path, counted against max_memory, to serve
// as role (the caller adds it to the server). A file some role already
// runs is not loaded twice: the roles share it.
func (n *Node) loadRole(ctx context.Context, role, path string) (*moa.RoleModel, error) {
	start := time.Now()
	var rm *moa.RoleModel
	var err error
	for _, other := range n.moaServer.Models() {
		if other.Model.Info().Path == path {
			rm, err = other.As(role)
			break
		}
	}
	if rm == nil && err == nil {
		// Registered in the store: named by its root (built once, kept
		// while the file is unchanged), and served to peers who check it.
		var me shards.ModelEntry
		if me, err = n.pipe.store.AddModel(path); err != nil {
			return nil, fmt.Errorf("role %s: %w", role, err)
		}
		var reserved int64
		if reserved, err = n.mem.reserve("role "+role+" ("+path+")", path, n.engineOptions()); err != nil {
			return nil, err
		}
		if rm, err = moa.LoadRoleNamed(ctx, role, path, me.CID, n.engineOptions()); err != nil {
			n.mem.release(reserved)
		} else {
			n.mem.hold(rm.Model, reserved)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("role %s: %w", role, err)
	}
	n.log.Info("serving role", "role", role, "model", rm.Name, "cid", rm.CID, "quant", rm.Quant,
		"tok_s", fmt.Sprintf("%.1f", rm.TokPerSec), "load_time", time.Since(start).Round(time.Millisecond))
	return rm, nil
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
