package node

import (
	"slices"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
)

// PS lists the models this peer has loaded (GET /v1/swarm/ps): roles
// (one entry per model file, with every role it serves) and shards, with
// their memory, sessions and queue; and apart, under References, the
// one-layer slices loaded to check other peers, which it does not serve.
func (n *Node) PS() (client.PS, error) {
	if n.Swarm() == nil {
		return client.PS{}, ErrNotRunning
	}
	out := client.PS{Models: []client.Loaded{}, Memory: n.mem.status()}
	if srv := n.moaServer; srv != nil {
		byModel := map[*engine.Model]int{}
		for _, rm := range srv.Models() {
			if i, ok := byModel[rm.Model]; ok {
				out.Models[i].Roles = append(out.Models[i].Roles, rm.Role)
				continue
			}
			byModel[rm.Model] = len(out.Models)
			l := loadedOut("role", rm.Model)
			l.Roles, l.Name, l.ModelCID, l.Quant, l.TokPerSec = []string{rm.Role}, rm.Name, rm.CID, rm.Quant, rm.TokPerSec
			out.Models = append(out.Models, l)
		}
	}
	if p := n.pipe; p != nil {
		for _, sh := range p.stages.Local() {
			l := loadedOut("shard", sh.Model)
			l.Name, l.ModelCID, l.Quant, l.MsPerLayer = sh.Name, sh.ModelCID, sh.Quant, sh.MsPerLayer
			out.Models = append(out.Models, l)
		}
	}
	if cs := n.checks; cs != nil && cs.ref != nil {
		out.References = cs.ref.loadedOut() // not the user's models: listed apart
	}
	return out, nil
}

// loadedOut describes a loaded engine model.
func loadedOut(kind string, m *engine.Model) client.Loaded {
	in, mem, opts := m.Info(), m.Memory(), m.Options()
	open, slots := m.Sessions()
	graphs, steps := m.Batching()
	return client.Loaded{Kind: kind, Path: in.Path, Start: in.LayerRange[0], End: in.LayerRange[1],
		WeightsBytes: mem.Weights, KVBytes: int64(m.CachedSlots()) * mem.KVPerSession, KVPerSessionBytes: mem.KVPerSession,
		Context: opts.Context, Sessions: open, Slots: slots, Queued: m.Queue().Waiting,
		Batched: !opts.Isolated, Steps: steps, Graphs: graphs,
		Backend: m.Backend(), GPUWeightsBytes: mem.GPU.Weights, GPUKVPerSessionBytes: mem.GPU.KVPerSession}
}

// loadedOut lists the reference models loaded now, by path.
func (r *reference) loadedOut() []client.Loaded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []client.Loaded
	for _, rm := range r.loaded {
		l := loadedOut("reference", rm.m)
		l.ModelCID = rm.model
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b client.Loaded) int { return a.Start - b.Start })
	return out
}
