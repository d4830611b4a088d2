package shards

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// writeTransferModel writes a small llama-shaped GGUF with F32 tensors of
// random bytes (seeded, so two seeds give two different models) and the
// tokenizer and chat template keys an originator needs.
func writeTransferModel(t testing.TB, path string, layers int, seed uint64) string {
	t.Helper()
	const h = 64
	g := &GGUF{Alignment: 32, KVs: []KV{
		{Key: "general.architecture", Type: TypeString, Value: "llama"},
		{Key: "general.name", Type: TypeString, Value: fmt.Sprintf("transfer-test-%d", seed)},
		{Key: "llama.block_count", Type: TypeUint32, Value: uint32(layers)},
		{Key: "llama.embedding_length", Type: TypeUint32, Value: uint32(h)},
		{Key: "llama.context_length", Type: TypeUint32, Value: uint32(512)},
		{Key: "llama.attention.head_count", Type: TypeUint32, Value: uint32(4)},
		{Key: "tokenizer.ggml.model", Type: TypeString, Value: "gpt2"},
		{Key: "tokenizer.ggml.tokens", Type: TypeArray, ArrayType: TypeString, Value: []string{"<s>", "</s>", "he", "llo", " world"}},
		{Key: "tokenizer.ggml.merges", Type: TypeArray, ArrayType: TypeString, Value: []string{"h e", "l lo"}},
		{Key: "tokenizer.chat_template", Type: TypeString, Value: "{% for m in messages %}{{ m.content }}{% endfor %}"},
	}}
	add := func(name string, dims ...uint64) {
		g.Tensors = append(g.Tensors, TensorInfo{Name: name, Type: GGMLF32, Dims: dims})
	}
	add("token_embd.weight", h, 5)
	add("output_norm.weight", h)
	add("output.weight", h, 5)
	for l := range layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", h)
		add(p+"attn_q.weight", h, h)
		add(p+"ffn_down.weight", h, 2*h)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(seed, 7))
	err = WriteGGUF(f, g, func(i int, w io.Writer) error {
		b := make([]byte, g.Tensors[i].Size)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, root, err := BuildManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	return root.String()
}

func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestStoreEnsureSlice(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "model.gguf")
	mc := writeTransferModel(t, model, 4, 1)
	dir := filepath.Join(tmp, "store")
	st := openStore(t, dir)
	m, err := st.AddModel(model)
	if err != nil {
		t.Fatal(err)
	}
	if m.CID != mc || m.Layers != 4 || m.Path != model {
		t.Fatalf("model entry %+v", m)
	}
	if _, err := st.EnsureSlice(mc, 1, 9); !errors.Is(err, ErrLayerRange) {
		t.Errorf("bad range: %v", err)
	}
	if _, err := st.EnsureSlice(writeTransferModel(t, filepath.Join(tmp, "other.gguf"), 2, 2), 0, 1); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}

	// Concurrent callers share one cut.
	var wg sync.WaitGroup
	got := make([]SliceEntry, 4)
	for i := range got {
		wg.Go(func() {
			e, err := st.EnsureSlice(mc, 1, 3)
			if err != nil {
				t.Error(err)
			}
			got[i] = e
		})
	}
	wg.Wait()
	e := got[0]
	for _, g := range got[1:] {
		if g != e {
			t.Fatalf("concurrent EnsureSlice disagree: %+v vs %+v", g, e)
		}
	}
	if e.Path != filepath.Join(st.Dir(), mc+".1-3.gguf") || e.Layers != 4 || e.OnDemand {
		t.Fatalf("slice entry %+v", e)
	}
	if fc, _ := FileCID(e.Path); fc.String() != e.CID {
		t.Fatalf("recorded CID %s, file hashes to %s", e.CID, fc)
	}
	g, err := ReadGGUFFile(e.Path)
	if err != nil {
		t.Fatal(err)
	}
	if g.String(SourceCIDKey) != mc || g.ModelInfo().LayerRange != [2]int{1, 3} {
		t.Fatalf("slice metadata: source %q, layers %v", g.String(SourceCIDKey), g.ModelInfo().LayerRange)
	}

	// The index survives a reopen; a changed external model is forgotten.
	st2 := openStore(t, dir)
	if e2, ok := st2.Slice(mc, 1, 3); !ok || e2 != e {
		t.Fatalf("after reopen: %+v %v", e2, ok)
	}
	if _, ok := st2.Model(mc); !ok {
		t.Fatal("model forgotten on reopen")
	}
	if err := os.WriteFile(model, []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := openStore(t, dir).Model(mc); ok {
		t.Fatal("changed model file still listed")
	}
	if _, err := st2.AddModel(e.Path); !errors.Is(err, ErrNotFullModel) {
		t.Errorf("AddModel of a slice: %v", err)
	}
}

// A slice cut from a wider slice must be byte-identical to one cut from the
// full model, or peers would announce different CIDs for the same shard.
func TestStoreSliceOfSliceIdentical(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "model.gguf")
	mc := writeTransferModel(t, model, 4, 3)
	full := openStore(t, filepath.Join(tmp, "full"))
	if _, err := full.AddModel(model); err != nil {
		t.Fatal(err)
	}
	wide, err := full.EnsureSlice(mc, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	part := openStore(t, filepath.Join(tmp, "part"))
	if _, err := part.ImportSlice(wide.Path, mc); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 1}, {1, 2}, {0, 3}, {1, 3}} {
		want, err := full.EnsureSlice(mc, r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		got, err := part.EnsureSlice(mc, r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		if got.CID != want.CID || got.Size != want.Size {
			t.Errorf("%v: from slice %s (%d B), from model %s (%d B)", r, got.CID, got.Size, want.CID, want.Size)
		}
	}
	if _, err := part.EnsureSlice(mc, 2, 4); !errors.Is(err, ErrLayersNotHeld) {
		t.Errorf("range beyond the held slice: %v", err)
	}
	if _, err := part.ImportSlice(wide.Path, writeTransferModel(t, filepath.Join(tmp, "o.gguf"), 2, 4)); !errors.Is(err, ErrBadShard) {
		t.Errorf("import under another model's CID: %v", err)
	}
}

func TestWriteHeader(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "model.gguf")
	writeTransferModel(t, model, 2, 5)
	out := filepath.Join(tmp, "header.gguf")
	if err := WriteHeader(model, out); err != nil {
		t.Fatal(err)
	}
	g, err := ReadGGUFFile(out)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := ReadGGUFFile(model)
	if len(g.Tensors) != 0 || len(g.KVs) != len(src.KVs) || g.String("tokenizer.chat_template") == "" || g.ArrayLen("tokenizer.ggml.tokens") != 5 {
		t.Fatalf("header: %d tensors, %d/%d keys", len(g.Tensors), len(g.KVs), len(src.KVs))
	}
	if fi, _ := os.Stat(out); fi.Size() > 2048 {
		t.Errorf("header-only file is %d bytes", fi.Size())
	}
	if err := WriteHeader(filepath.Join(tmp, "none.gguf"), out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing input: %v", err)
	}
}
