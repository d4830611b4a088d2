package node_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/shards"
)

// poisonedSlice writes layers [0,2) of full with two vocabulary entries
// swapped: a header cut from it would make an originator print other text.
// It claims to be a slice of the real model (its source is the real root).
func poisonedSlice(t *testing.T, full string) string {
	t.Helper()
	dir := t.TempDir()
	honest := filepath.Join(dir, "honest.gguf")
	if _, err := shards.SliceFile(full, honest, 0, 2); err != nil {
		t.Fatal(err)
	}
	g, err := shards.ReadGGUFFile(honest)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(honest)
	// The liar strips the manifest the slice carries (it would give it away).
	g.KVs = slices.DeleteFunc(g.KVs, func(kv shards.KV) bool { return kv.Key == shards.ManifestKey })
	for i, kv := range g.KVs {
		if kv.Key == "tokenizer.ggml.tokens" {
			toks := slices.Clone(kv.Value.([]string))
			toks[300], toks[301] = toks[301], toks[300]
			g.KVs[i].Value = toks
		}
	}
	tensors := slices.Clone(g.Tensors)
	var buf bytes.Buffer
	err = shards.WriteGGUF(&buf, g, func(i int, w io.Writer) error {
		t := tensors[i]
		_, err := w.Write(raw[g.DataOffset+int64(t.Offset) : g.DataOffset+int64(t.Offset+t.Size)])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "poisoned.gguf")
	os.WriteFile(out, buf.Bytes(), 0o644)
	return out
}

// TestPoisonedHeaderRefused: a peer announcing layers of the model serves
// a header with an altered vocabulary. A fresh originator that asks it
// first refuses it (it does not match the model's manifest), takes the
// honest holder's, and caches nothing of the liar's.
func TestPoisonedHeaderRefused(t *testing.T) {
	full := tinyModel(t)
	_, _, root, err := shards.BuildManifest(full)
	if err != nil {
		t.Fatal(err)
	}
	honestCfg := nodetest.Config(t.TempDir())
	honestCfg.Shards = []string{full + ":0-4"}
	honestCfg.Engine = node.EngineConfig{Threads: 1}
	honest := nodetest.Start(t, honestCfg)
	boot := honest.Addr(t)
	liarCfg := nodetest.Config(t.TempDir())
	liarCfg.Bootstrap = []string{boot}
	bad := poisonedSlice(t, full)
	liarCfg.Shards = []string{bad + ":0-2"}
	// The liar's store holds the poisoned slice, so it serves headers cut
	// from it over the real transfer protocol.
	lst, err := shards.OpenStore(filepath.Join(liarCfg.DataDir, "models"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lst.ImportSlice(bad, root.String()); err != nil {
		t.Fatal(err)
	}
	if h, err := lst.EnsureHeader(root.String()); err != nil {
		t.Fatal(err)
	} else if g, _ := shards.ReadGGUFFile(h.Path); g == nil {
		t.Fatal("no header")
	}
	liarCfg.Engine = node.EngineConfig{Threads: 1}
	liar := nodetest.Start(t, liarCfg)
	cfg := nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{boot}
	origin := nodetest.Start(t, cfg)
	// Both announce the model's root once their shards have loaded.
	nodetest.Eventually(t, 30*time.Second, "origin sees both holders announce the model", func() bool {
		return nodetest.SeesShards(origin, honest.ID(), liar.ID()) &&
			len(honest.Swarm().View().HoldersOf(root.String())) > 0 && len(liar.Swarm().View().HoldersOf(root.String())) > 0
	})
	tok, err := origin.TokenizerForTest(t.Context(), root.String(), liar.ID(), honest.ID())
	if err != nil {
		t.Fatal(err)
	}
	want, err := shards.ReadGGUFFile(full)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := want.Get("tokenizer.ggml.tokens")
	if got := tok.Token(300); got != v.([]string)[300] {
		t.Fatalf("token 300 decodes as %q, the model says %q: the liar's header was used", got, v.([]string)[300])
	}
	// The header the originator kept is the model's.
	st, err := shards.OpenStore(filepath.Join(cfg.DataDir, "models"))
	if err != nil {
		t.Fatal(err)
	}
	h, ok := st.Header(root.String())
	m, _, mok := st.Manifest(root.String())
	if !ok || !mok {
		t.Fatal("no header or manifest kept")
	}
	if err := m.VerifyHeader(h.Path, root.String()); err != nil {
		t.Fatal(err)
	}
}

// TestPoisonedLocalSliceRefused: a slice file given to a peer that carries
// its model's manifest but altered weights is refused when it loads, not
// served under the model's root.
func TestPoisonedLocalSliceRefused(t *testing.T) {
	full := tinyModel(t)
	dir := t.TempDir()
	honest := filepath.Join(dir, "honest.gguf")
	if _, err := shards.SliceFile(full, honest, 0, 2); err != nil {
		t.Fatal(err)
	}
	g, err := shards.ReadGGUFFile(honest)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(honest)
	tensors := slices.Clone(g.Tensors)
	var buf bytes.Buffer
	err = shards.WriteGGUF(&buf, g, func(i int, w io.Writer) error {
		t := tensors[i]
		b := bytes.Clone(raw[g.DataOffset+int64(t.Offset) : g.DataOffset+int64(t.Offset+t.Size)])
		if t.Name == "blk.1.attn_q.weight" {
			b[0] ^= 0x10
		}
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(bad, buf.Bytes(), 0o644)
	cfg := nodetest.Config(t.TempDir())
	cfg.Shards = []string{bad + ":0-2"}
	cfg.Engine = node.EngineConfig{Threads: 1}
	// Shard files load in the background: the peer starts, refuses the
	// slice (its warnings say why) and serves nothing.
	p := nodetest.Start(t, cfg)
	var st client.Status
	nodetest.Eventually(t, 20*time.Second, "the poisoned slice refused", func() bool {
		st, err = p.Status()
		return err == nil && strings.Contains(strings.Join(st.Warnings, "\n"), "blk.1.attn_q.weight")
	})
	if w := strings.Join(st.Warnings, "\n"); !strings.Contains(w, shards.ErrMismatch.Error()) {
		t.Fatalf("warnings %q: want the mismatch", w)
	}
	if ps, err := p.PS(); err != nil || len(ps.Models) != 0 {
		t.Fatalf("a poisoned slice was served: %+v %v", ps, err)
	}
}
