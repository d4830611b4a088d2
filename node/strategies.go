package node

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/shards"
)

// engineOptions are the engine settings of every model this peer loads.
func (n *Node) engineOptions() engine.Options {
	return engine.Options{Threads: n.cfg.Engine.Threads, Slots: n.cfg.Engine.Slots, Queue: n.cfg.Engine.Queue,
		Context: n.cfg.Engine.Context, Isolated: n.cfg.Engine.Isolate, Logger: n.log,
		GPULayers: n.cfg.Engine.gpuLayers(), GPUMemory: int64(n.cfg.Engine.GPUMemory)}
}

// startMoA registers the MoA protocol, loads the configured role models and
// builds this peer's originator.
func (n *Node) startMoA() error {
	n.moaServer = moa.NewServer(n.host, n.log)
	n.moaServer.DraftMin, n.moaServer.DraftMax = n.cfg.MoA.DraftMin, n.cfg.MoA.DraftMax
	n.moaServer.Status = func() (string, int) {
		thermal, bat := n.readPower()
		if bat == nil {
			return thermal, 0
		}
		return thermal, bat.Percent
	}
	n.moaServer.Refuse = n.refusing
	n.moaServer.Rank = n.rank
	n.moaServer.Acknowledge = n.ledger.Ack
	roles := make([]string, 0, len(n.cfg.Roles))
	for r := range n.cfg.Roles {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	// Checked now, so that a missing or broken file or a model that does
	// not fit max_memory stops the start; loaded in the background, so that
	// the API answers (and shows the loads' progress) while multi-GB
	// weights load. A role is announced once its model is loaded.
	reserved := map[string]int64{} // per file: roles sharing one load it once
	for _, role := range roles {
		path := n.cfg.Roles[role]
		if _, done := reserved[path]; done {
			continue
		}
		r, err := n.mem.reserve("role "+role+" ("+path+")", path, n.engineOptions())
		if err != nil {
			for _, r := range reserved {
				n.mem.release(r)
			}
			return err
		}
		reserved[path] = r
	}
	n.loads.run(func(ctx context.Context) {
		for _, role := range roles {
			path := n.cfg.Roles[role]
			r, first := reserved[path]
			if !first {
				r = -1 // shares the first role's load, or reserves its own if that failed
			}
			delete(reserved, path)
			rm, err := n.loadRoleReserved(ctx, role, path, r)
			if err != nil {
				if ctx.Err() == nil {
					n.log.Error("role not loaded", "role", role, "path", path, "err", err)
					n.health.set("role "+role, err.Error())
				}
				continue
			}
			n.moaServer.Add(rm)
			go n.publishPS("roles") // takes n.mu: never from this goroutine, which Close waits for
		}
	})
	// Shard files' loads started before (startPipeline): all are counted.
	n.loads.seal()
	return nil
}

// waitStartLoads waits until the roles and shards given at start have
// loaded (or failed), or until ctx ends: a question asked while they load
// is answered once they can take part, as it would have been had it come
// a moment later.
func (n *Node) waitStartLoads(ctx context.Context) error {
	ended := n.loads.ended()
	if ended == nil {
		return nil
	}
	select {
	case <-ended:
	default:
		n.log.Debug("query waits for this peer's models to load")
		select {
		case <-ended:
		case <-ctx.Done():
			return answer.Errorf(answer.Cancelled, "while this peer's models were loading: %w", ctx.Err())
		}
	}
	// Routing reads the view: wait (two heartbeats at most) for this
	// peer's own record there to list what just loaded. The loads may have
	// ended a moment ago, their record not yet in the view.
	deadline := time.Now().Add(2 * time.Duration(n.cfg.Heartbeat))
	for time.Now().Before(deadline) && ctx.Err() == nil && !n.selfAnnounced() {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// selfAnnounced reports whether this peer's record in its own view lists
// every role and shard it serves.
func (n *Node) selfAnnounced() bool {
	s := n.Swarm()
	if s == nil {
		return true
	}
	self, ok := s.View().Get(n.host.ID())
	if !ok {
		return false
	}
	roles, shards := len(n.moaServer.Models()), len(n.pipe.stages.Local())
	return len(self.Cap.Roles) >= roles && len(self.Cap.Shards) >= shards
}

// waitLoads stops the background loads of Start and waits for them.
func (n *Node) waitLoads() { n.loads.stop() }

// stageEngine is a load's stage once its weights are read.
const stageEngine = "loading into engine"

// loadOptions is engineOptions with the weights' load reported as t's
// progress, in percent.
func (n *Node) loadOptions(t *task) engine.Options {
	o := n.engineOptions()
	o.LoadProgress = func(f float32) {
		if f >= 1 {
			// The weights are read; the engine sets up the model (the
			// compute graph, the KV cache, a speed measurement): a stage
			// of its own, not "weights 100%" for seconds.
			t.update(stageEngine, 100, 100)
			return
		}
		t.update("weights", int64(f*100), 100)
	}
	return o
}

// loadRole loads the GGUF at path, counted against max_memory, to serve
// as role (the caller adds it to the server). A file some role already
// runs is not loaded twice: the roles share it.
func (n *Node) loadRole(ctx context.Context, role, path string) (*moa.RoleModel, error) {
	return n.loadRoleReserved(ctx, role, path, -1)
}

// loadRoleReserved is loadRole for a file whose memory is reserved
// already (reserved >= 0: released here if the role shares another's
// model or fails to load).
func (n *Node) loadRoleReserved(ctx context.Context, role, path string, reserved int64) (rm *moa.RoleModel, err error) {
	start := time.Now()
	t := n.tasks.startIn(ctx, "load", "role "+role+": "+path, "percent", 100)
	defer func() { t.finish(err) }()
	for _, other := range n.moaServer.Models() {
		if other.Model.Info().Path == path {
			rm, err = other.As(role)
			break
		}
	}
	if rm != nil || err != nil {
		if reserved > 0 {
			n.mem.release(reserved)
		}
	} else {
		// Registered in the store: named by its root (built once, kept
		// while the file is unchanged), and served to peers who check it.
		t.update("manifest", 0, 0)
		var me shards.ModelEntry
		if me, err = n.pipe.store.AddModel(path); err != nil {
			if reserved > 0 {
				n.mem.release(reserved)
			}
			return nil, fmt.Errorf("role %s: %w", role, err)
		}
		if reserved < 0 {
			if reserved, err = n.mem.reserve("role "+role+" ("+path+")", path, n.engineOptions()); err != nil {
				return nil, err
			}
		}
		t.update("weights", 0, 100)
		if rm, err = moa.LoadRoleNamed(ctx, role, path, me.CID, n.loadOptions(t)); err != nil {
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
		Host: n.host, View: n.swarm.View(), Local: n.moaServer, Log: n.log,
		Timeouts: moa.Timeouts{Simple: time.Duration(n.cfg.MoA.SimpleTimeout),
			Complex: time.Duration(n.cfg.MoA.ComplexTimeout), Speed: time.Duration(n.cfg.MoA.SpeedTimeout)},
		Progress:    n.cfg.Progress.swarm(),
		ConnKind:    n.nat.ConnKind,
		Unverified:  moa.Unverified(n.cfg.MoA.Unverified),
		Acknowledge: n.ledger.Ack,
		Introduce:   n.ledger.Introduce,
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
