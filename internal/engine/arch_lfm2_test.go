package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/ml"

	"github.com/llmswarm/llmswarm/shards"
)

// TestLFM2Slices: every stage slice of an LFM2 model loads (ollama's own
// loader refuses them: the engine builds the model), holding its layers,
// the embedding in the first and the head in the last; a slice that
// lacks a tensor of a layer it holds, or the embedding or head its ends
// need, is refused naming the tensors.
func TestLFM2Slices(t *testing.T) {
	full := synthFile(t, "lfm2", "tiny", "f32")
	checkSlices(t, full, []sliceHole{
		{1, 3, []string{"blk.2.ffn_norm.weight"}, "blk.2.ffn_norm.weight"},
		{1, 3, []string{"blk.1.attn_k_norm.weight", "blk.2.shortconv.conv.weight"}, "blk.1.attn_k_norm.weight, blk.2.shortconv.conv.weight"},
		{0, 2, []string{"blk.0.ffn_gate.weight"}, "blk.0.ffn_gate.weight"},
		{0, 2, []string{"token_embd.weight"}, "token_embd.weight"},
		{2, 4, []string{"output_norm.weight"}, "output_norm.weight"},
		{1, 4, []string{"blk.2.attn_norm.weight", "blk.2.shortconv.conv.weight", "blk.2.shortconv.in_proj.weight",
			"blk.2.shortconv.out_proj.weight", "blk.2.ffn_norm.weight", "blk.2.ffn_up.weight", "blk.2.ffn_down.weight", "blk.2.ffn_gate.weight"},
			"layers [1,4) lacks blk.2.attn_norm.weight"},
	})
	// LFM2-MoE: an expert layer's tensors, the experts' bias aside (ollama
	// runs without one)
	moe := synthFile(t, "lfm2moe", "tiny", "f32")
	p := filepath.Join(t.TempDir(), "moe.gguf")
	sliceFile(t, moe, p, 1, 3)
	q := filepath.Join(t.TempDir(), "moe-holed.gguf")
	dropTensors(t, p, q, "blk.2.ffn_up_exps.weight", "blk.1.ffn_gate_inp.weight")
	if _, err := Load(context.Background(), q, Options{Threads: 1}); !errors.Is(err, ErrMissingLayers) ||
		!strings.Contains(err.Error(), "blk.1.ffn_gate_inp.weight, blk.2.ffn_up_exps.weight") {
		t.Errorf("lfm2moe slice without a router and experts: %v, want ErrMissingLayers naming them", err)
	}
	// a whole file goes through ollama's loader, whose Validate names the layer
	q = filepath.Join(t.TempDir(), "holed.gguf")
	dropTensors(t, full, q, "blk.1.attn_q.weight")
	if _, err := Load(context.Background(), q, Options{Threads: 1}); err == nil || !strings.Contains(err.Error(), "blk.1 attention") {
		t.Errorf("whole file without blk.1.attn_q.weight: %v, want ollama's refusal naming blk.1's attention", err)
	}
}

// TestLFM2SliceBuild: the model the engine builds for a slice, built on a
// whole file, holds every tensor where ollama's own loader puts it: the
// same tensors in the same fields, byte for byte.
func TestLFM2SliceBuild(t *testing.T) {
	for _, arch := range []string{"lfm2", "lfm2moe"} {
		t.Run(arch, func(t *testing.T) {
			full := synthFile(t, arch, "tiny", "f32")
			ref := loadT(t, full, Options{NoRepack: true, Slots: 1, Context: 64})
			want := tensorFields(reflect.ValueOf(ref.m), "")
			b, err := ml.NewBackend(full, ml.BackendParams{AllocMemory: true, NumThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			m, err := buildLFM2(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Load(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			got := tensorFields(reflect.ValueOf(m), "")
			if arch == "lfm2moe" {
				// layer 0 dense, the others experts with the router's bias
				for _, f := range []string{".Layers[0].MLP.Up.Weight", ".Layers[1].MLP.Router.Weight", ".Layers[3].MLP.Down.Weight", ".Layers[3].MLP.Bias"} {
					if want[f] == nil {
						t.Errorf("ollama's model has no %s", f)
					}
				}
			}
			if len(want) < 10 || len(got) != len(want) {
				t.Fatalf("built model has %d tensors, ollama's %d", len(got), len(want))
			}
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					t.Errorf("%s: ollama's loader set it, the build did not", name)
					continue
				}
				if !slices.Equal(g.Shape(), w.Shape()) || g.DType() != w.DType() || !slices.Equal(g.Bytes(), w.Bytes()) {
					t.Errorf("%s: built %v %v, ollama's %v %v, or other bytes", name, g.Shape(), g.DType(), w.Shape(), w.DType())
				}
			}
			for i := range m.Layers {
				if miss := lfm2Missing(m, i); len(miss) > 0 {
					t.Errorf("layer %d lacks %v", i, miss)
				}
			}
		})
	}
}

// tensorFields lists the tensors set in v's exported fields (text model
// only), by their path in the struct.
func tensorFields(v reflect.Value, path string) map[string]ml.Tensor {
	out := map[string]ml.Tensor{}
	tensorType := reflect.TypeFor[ml.Tensor]()
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		if v.Kind() == reflect.Interface && v.Type() == tensorType || v.Type().Implements(tensorType) && v.Kind() == reflect.Pointer {
			if !v.IsNil() {
				out[path] = v.Interface().(ml.Tensor)
			}
			return
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem(), path)
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		case reflect.Struct:
			for i := range v.NumField() {
				f := v.Type().Field(i)
				switch {
				case !f.IsExported(), f.Name == "Base", f.Name == "Tokenizer", f.Name == "Options",
					f.Name == "VisionModel", f.Name == "VisionProjector", f.Name == "ImageProcessor":
					continue
				}
				walk(v.Field(i), path+"."+f.Name)
			}
		}
	}
	walk(v, path)
	return out
}

// dropTensors copies the GGUF from to to without the tensors named.
func dropTensors(t *testing.T, from, to string, names ...string) {
	t.Helper()
	rewriteHeader(t, from, to, func(g *shards.GGUF) {
		keep := slices.DeleteFunc(slices.Clone(g.Tensors), func(ti shards.TensorInfo) bool { return slices.Contains(names, ti.Name) })
		if len(keep) != len(g.Tensors)-len(names) {
			t.Fatalf("%s: not every tensor of %v is there to drop", from, names)
		}
		g.Tensors = keep
	})
}
