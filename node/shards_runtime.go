package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ipfs/go-cid"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

// AddShard serves layers of a model while the peer runs (POST
// /v1/swarm/shards), as the shards config key does at start: spec is
// "PATH.gguf:A-B" (a full model, sliced into the data dir, or a slice) or
// "MODEL:A-B", MODEL a CID or the name of a model this peer knows (one
// that live peers announce shards of, or that its store holds) (fetched from a peer that holds the layers, checked
// against the model's manifest, in one attempt). Counted against
// max_memory; announced from the next heartbeat. A shard served already
// is left as it is.
func (n *Node) AddShard(ctx context.Context, spec string) (client.Shard, error) {
	if n.Swarm() == nil {
		return client.Shard{}, ErrNotRunning
	}
	s, err := ParseShardSpec(spec)
	if err != nil {
		return client.Shard{}, badRequest("%s", strings.TrimPrefix(err.Error(), "config: "))
	}
	if s.CID != "" {
		if s.CID, err = n.shardModel(s.CID); err != nil {
			return client.Shard{}, answer.Wrap(answer.BadRequest, fmt.Errorf("shard %s: %w", spec, err))
		}
	}
	defer n.publishPS("shards")
	n.runMu.Lock()
	defer n.runMu.Unlock()
	before := len(n.pipe.stages.Local())
	if s.Path != "" {
		err = n.loadShardFile(ctx, s)
	} else {
		err = n.tryFetchShard(ctx, s)
	}
	switch {
	case errors.Is(err, errNoMemory):
		return client.Shard{}, answer.Wrap(answer.NoMemory, err)
	case err != nil && ctx.Err() != nil:
		return client.Shard{}, answer.Wrap(answer.Cancelled, err)
	case err != nil:
		return client.Shard{}, answer.Wrap(answer.BadRequest, err)
	}
	local := n.pipe.stages.Local()
	if len(local) > before {
		return client.Shard(local[len(local)-1].Capability()), nil
	}
	for _, sh := range local { // served already
		if sh.Start == s.Start && sh.End == s.End && (s.CID == "" || sh.ModelCID == s.CID) {
			return client.Shard(sh.Capability()), nil
		}
	}
	return client.Shard{}, fmt.Errorf("shard %s: loaded, but not found among those served", spec)
}

// shardModel is the model CID that model names in a shard spec: a CID
// (already canonical: ParseShardSpec), or the name of the one model of that
// name that live peers announce shards of or that this peer's store holds.
func (n *Node) shardModel(model string) (string, error) {
	if _, err := cid.Decode(model); err == nil {
		if _, err := shards.ParseModelCID(model); err != nil {
			return "", err
		}
		return model, nil
	}
	cids := map[string]bool{}
	for _, p := range n.Swarm().View().Peers() {
		for _, sh := range p.Cap.Shards {
			if p.Alive && sh.ModelName == model {
				cids[sh.ModelCID] = true
			}
		}
	}
	ms, _ := n.pipe.store.List()
	for _, m := range ms {
		if m.Name == model {
			cids[m.CID] = true
		}
	}
	switch len(cids) {
	case 0:
		return "", fmt.Errorf("%q is neither a CID nor the name of a model this peer knows (swarmctl shards lists the models live peers hold, with their CIDs)", model)
	case 1:
		for c := range cids {
			return c, nil
		}
	}
	all := slices.Sorted(maps.Keys(cids))
	return "", fmt.Errorf("%q names %d models: give its CID, one of %s", model, len(all), strings.Join(all, ", "))
}

// RemoveShard stops serving layers [a,b) of model (DELETE
// /v1/swarm/shards/MODEL/A-B): no new session opens on them, those open
// finish, then the layers are unloaded and their memory given back.
func (n *Node) RemoveShard(model string, a, b int) error {
	if n.Swarm() == nil {
		return ErrNotRunning
	}
	defer n.publishPS("shards")
	n.runMu.Lock()
	defer n.runMu.Unlock()
	var m *engine.Model
	for _, sh := range n.pipe.stages.Local() {
		if sh.ModelCID == model && sh.Start == a && sh.End == b {
			m = sh.Model
		}
	}
	served, freed := n.pipe.stages.Remove(model, a, b)
	if !served {
		return answer.Errorf(answer.NotFound, "layers [%d,%d) of %s are not served here", a, b, model)
	}
	n.log.Info("shard no longer served", "model", model, "layers", fmt.Sprintf("[%d,%d)", a, b))
	go func() {
		<-freed
		n.mem.releaseModel(m)
	}()
	return nil
}
