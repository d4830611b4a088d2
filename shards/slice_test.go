package shards

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func tensorData(t *testing.T, path, name string) []byte {
	t.Helper()
	g, err := ReadGGUFFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := g.Tensor(name)
	if !ok {
		t.Fatalf("%s: no tensor %s", path, name)
	}
	b, _ := os.ReadFile(path)
	return b[g.DataOffset+int64(ti.Offset) : g.DataOffset+int64(ti.Offset+ti.Size)]
}

func TestSlice(t *testing.T) {
	dir := t.TempDir()
	type want struct {
		rng          [2]int
		embd, head   bool
		tensors      []string // must be present
		absent       []string
		placeholder  bool
		outputIsEmbd bool
	}
	cases := []struct {
		name string
		tm   testModel
		a, b int
		w    want
	}{
		{"tied first", testModel{"qwen3", 4, 64, true, false}, 0, 2,
			want{[2]int{0, 2}, true, false, []string{"token_embd.weight", "blk.1.attn_q.weight"}, []string{"blk.2.attn_q.weight", "output_norm.weight"}, true, false}},
		{"tied middle", testModel{"qwen3", 4, 64, true, false}, 1, 3,
			want{[2]int{1, 3}, false, false, []string{"blk.1.attn_q.weight", "blk.2.ffn_down.weight"}, []string{"token_embd.weight", "output.weight", "blk.0.attn_norm.weight"}, false, false}},
		{"tied last", testModel{"qwen3", 4, 64, true, false}, 3, 4,
			want{[2]int{3, 4}, false, true, []string{"output.weight", "output_norm.weight"}, []string{"token_embd.weight"}, false, true}},
		{"untied first", testModel{"llama", 4, 64, false, true}, 0, 1,
			want{[2]int{0, 1}, true, false, []string{"rope_freqs.weight"}, []string{"output_norm.weight"}, true, false}},
		{"untied last", testModel{"llama", 4, 64, false, true}, 2, 4,
			want{[2]int{2, 4}, false, true, []string{"rope_freqs.weight", "output.weight"}, []string{"token_embd.weight"}, false, false}},
		{"whole", testModel{"qwen2", 3, 64, true, false}, 0, 3,
			want{[2]int{0, 3}, true, true, []string{"token_embd.weight"}, []string{"output.weight"}, false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := filepath.Join(dir, c.name+"-in.gguf")
			out := filepath.Join(dir, c.name+"-out.gguf")
			c.tm.write(t, in)
			mi, err := Slice(in, out, c.a, c.b)
			if err != nil {
				t.Fatal(err)
			}
			if mi.LayerRange != c.w.rng || mi.HasEmbedding != c.w.embd || mi.HasHead != c.w.head || mi.Layers != c.tm.layers {
				t.Fatalf("info %+v", mi)
			}
			g, err := ReadGGUFFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if g.ArrayLen("tokenizer.ggml.tokens") != 4 || g.String("general.name") != "test-"+c.tm.arch {
				t.Fatal("metadata not kept")
			}
			for _, n := range c.w.tensors {
				if _, ok := g.Tensor(n); !ok {
					t.Errorf("missing %s", n)
				} else if n != "output.weight" || !c.w.outputIsEmbd {
					if !bytes.Equal(tensorData(t, out, n), tensorData(t, in, n)) {
						t.Errorf("%s data differs", n)
					}
				}
			}
			for _, n := range c.w.absent {
				if _, ok := g.Tensor(n); ok {
					t.Errorf("unexpected %s", n)
				}
			}
			o, hasOut := g.Tensor("output.weight")
			if c.w.placeholder && (!hasOut || o.Dims[1] != 1) {
				t.Errorf("no placeholder output.weight: %+v", o)
			}
			if c.w.outputIsEmbd && !bytes.Equal(tensorData(t, out, "output.weight"), tensorData(t, in, "token_embd.weight")) {
				t.Error("tied head is not the embedding")
			}
			// slicing a slice works when it holds the range
			again := filepath.Join(dir, c.name+"-again.gguf")
			if _, err := Slice(out, again, c.a, c.b); err != nil {
				t.Fatalf("re-slice: %v", err)
			}
		})
	}
	// errors
	in := filepath.Join(dir, "tied first-out.gguf") // layers [0,2) only
	for _, r := range [][2]int{{1, 3}, {2, 2}, {-1, 1}, {0, 9}} {
		if _, err := Slice(in, filepath.Join(dir, "x.gguf"), r[0], r[1]); !errors.Is(err, ErrLayerRange) {
			t.Errorf("range %v: %v", r, err)
		}
	}
	if _, err := Slice(filepath.Join(dir, "none.gguf"), filepath.Join(dir, "x.gguf"), 0, 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing input: %v", err)
	}
}
