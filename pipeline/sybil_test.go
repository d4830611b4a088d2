package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/test"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestSybilsDoNotChangeTheShape: three identities announcing the model's
// root with another shape (and every layer of it), plus one announcing
// another model under the same name, neither change the shape (it comes
// from the manifest) nor take the name or the default query over: the
// generation is the single-machine one.
func TestSybilsDoNotChangeTheShape(t *testing.T) {
	full, root := model(t, "qwen3")
	man, _, _, err := shards.BuildManifest(full)
	if err != nil {
		t.Fatal(err)
	}
	self, a, b := newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serve(t, "qwen3", 0, 2)
	b.serve(t, "qwen3", 2, 4)
	o := originatorFor(t, "qwen3", self, a, b)
	fetched := 0
	o.Manifest = func(_ context.Context, r string, _ []swarm.ShardHolder) (*shards.Manifest, error) {
		fetched++
		if r != root {
			t.Errorf("manifest asked for %s, want %s", r, root)
		}
		return man, nil
	}
	name := a.srv.Shards()[0].ModelName
	seq := uint64(100)
	lie := func(s gossip.Shard) {
		id, err := test.RandPeerID()
		if err != nil {
			t.Fatal(err)
		}
		seq++
		o.View.Observe(&gossip.Capability{PeerID: id.String(), Seq: seq, Shards: []gossip.Shard{s}, Load: gossip.Load{Capacity: 4}, Platform: gossip.Platform{Arch: engine.ComputeArch()}}, time.Now())
	}
	for range 3 {
		lie(gossip.Shard{ModelCID: root, ModelName: name, Start: 0, End: 8, Layers: 8, Hidden: man.Hidden * 2, MsPerLayer: 0.001})
	}
	other, _ := shards.ParseModelCID("bagaaieraajxbc3ngv2y6jvrpsj65rj4kpt3a7c7xxlqudzizafoppuqyhjla")
	lie(gossip.Shard{ModelCID: other.String(), ModelName: name, Start: 0, End: man.Layers, Layers: man.Layers, Hidden: man.Hidden})

	want := reference(t, "qwen3", question, 12)
	think := false
	for _, m := range []string{root, name, ""} {
		ref, _, err := o.Resolve(m)
		if err != nil {
			t.Fatalf("resolve %q: %v", m, err)
		}
		if ref.CID != root || ref.Layers != man.Layers || ref.Hidden != man.Hidden {
			t.Fatalf("resolve %q: %+v, want %s with %d layers of %d", m, ref, root, man.Layers, man.Hidden)
		}
		res, err := o.Generate(context.Background(), Request{Model: m, Messages: question, Think: &think, MaxTokens: 12, Sampling: greedy})
		if err != nil {
			t.Fatalf("generate %q: %v", m, err)
		}
		if !sameTokens(res.Tokens, want) {
			t.Fatalf("generate %q: %v, single machine %v", m, res.Tokens, want)
		}
	}
	if fetched == 0 {
		t.Fatal("the shape did not come from the manifest")
	}
}

// TestModelRefExperts: whether a model is a mixture of experts (which
// loosens the ban margin between builds: banMargin) comes from its
// manifest's tensors; with no manifest it counts as one.
func TestModelRefExperts(t *testing.T) {
	for arch, want := range map[string]bool{"qwen3": false, "qwen3moe": true, "llama4": true, "gemma3": false} {
		full, root := model(t, arch)
		man, _, _, err := shards.BuildManifest(full)
		if err != nil {
			t.Fatal(err)
		}
		self, a := newStagePeer(t), newStagePeer(t)
		a.serve(t, arch, 0, man.Layers)
		o := originatorFor(t, arch, self, a)
		ref, _, err := o.Resolve(root)
		if err != nil || !ref.Experts {
			t.Fatalf("%s without a manifest: experts %v (%v), want true", arch, ref.Experts, err)
		}
		o.Manifest = func(context.Context, string, []swarm.ShardHolder) (*shards.Manifest, error) { return man, nil }
		if ref, _, err = o.Resolve(root); err != nil || ref.Experts != want {
			t.Errorf("%s: experts %v (%v), want %v", arch, ref.Experts, err, want)
		}
	}
}
