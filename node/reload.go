package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/llmswarm/llmswarm/shards"
)

// Reload applies cfg's roles and shards to the running peer, as swarmd
// does on SIGHUP with its config file re-read: roles and shards it no
// longer names stop being served (what runs on them finishes), new ones
// are loaded, a role given another file is replaced. Other keys need a
// restart: a change to them is reported, not applied. It returns what it
// changed, one line each, and every error joined (one role or shard that
// fails does not stop the others).
func (n *Node) Reload(ctx context.Context, cfg Config) ([]string, error) {
	if n.Swarm() == nil {
		return nil, ErrNotRunning
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	note := func(format string, args ...any) { done = append(done, fmt.Sprintf(format, args...)) }

	for _, rm := range n.moaServer.Models() {
		if _, keep := cfg.Roles[rm.Role]; !keep {
			if err := n.RemoveRole(rm.Role); err != nil {
				errs = append(errs, err)
			} else {
				note("role %s: no longer served", rm.Role)
			}
		}
	}
	for _, role := range slices.Sorted(maps.Keys(cfg.Roles)) {
		path := cfg.Roles[role]
		if cur := n.servedRole(role); cur != nil && cur.Model.Info().Path == path {
			continue
		}
		if _, err := n.AddRole(ctx, role, path); err != nil {
			errs = append(errs, err)
		} else {
			note("role %s: serving %s", role, path)
		}
	}

	want := map[shardKey]string{}
	for _, spec := range cfg.Shards {
		k, err := n.shardKeyOf(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", spec, err))
			continue
		}
		want[k] = spec
	}
	for _, sh := range n.pipe.stages.Local() {
		k := shardKey{sh.ModelCID, sh.Start, sh.End}
		if _, keep := want[k]; keep {
			delete(want, k) // served already
			continue
		}
		if err := n.RemoveShard(sh.ModelCID, sh.Start, sh.End); err != nil {
			errs = append(errs, err)
		} else {
			note("shard %s [%d,%d): no longer served", sh.ModelCID, sh.Start, sh.End)
		}
	}
	for _, spec := range slices.Sorted(maps.Values(want)) {
		if _, err := n.AddShard(ctx, spec); err != nil {
			errs = append(errs, err)
		} else {
			note("shard %s: serving", spec)
		}
	}
	if changed := restartKeys(n.Config, cfg); len(changed) > 0 {
		errs = append(errs, fmt.Errorf("changed keys that need a restart, not applied: %v", changed))
	}
	return done, errors.Join(errs...)
}

// shardKey names served layers: the model's root and the range.
type shardKey struct {
	model      string
	start, end int
}

// shardKeyOf resolves a shard spec to the model root it serves layers of.
func (n *Node) shardKeyOf(spec string) (shardKey, error) {
	s, err := ParseShardSpec(spec)
	if err != nil {
		return shardKey{}, err
	}
	k := shardKey{s.CID, s.Start, s.End}
	if s.CID != "" {
		if root, ok := n.pipe.store.RootOf(s.CID); ok {
			k.model = root
		}
		return k, nil
	}
	info, err := shards.ReadModelInfo(s.Path)
	if err != nil {
		return k, err
	}
	if info.LayerRange == [2]int{0, info.Layers} && info.HasEmbedding && info.HasHead {
		me, err := n.pipe.store.AddModel(s.Path) // kept while the file is unchanged: no second hash
		if err != nil {
			return k, err
		}
		k.model = me.CID
		return k, nil
	}
	g, err := shards.ReadGGUFFile(s.Path)
	if err != nil {
		return k, err
	}
	k.model = g.String(shards.SourceCIDKey)
	return k, nil
}

// restartKeys lists the top-level keys that differ between two configs,
// other than roles and shards, which Reload applies.
func restartKeys(old, cfg Config) []string {
	a, b := old, cfg
	a.Roles, b.Roles, a.Shards, b.Shards = nil, nil, nil, nil
	ja, jb := mustJSONMap(a), mustJSONMap(b)
	var out []string
	for k := range ja {
		if fmt.Sprint(ja[k]) != fmt.Sprint(jb[k]) {
			out = append(out, k)
		}
	}
	for k := range jb {
		if _, ok := ja[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// mustJSONMap is c as a map of its top-level JSON keys.
func mustJSONMap(c Config) map[string]any {
	b, _ := json.Marshal(c)
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}
