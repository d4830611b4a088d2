package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// refusesRanges checks that a whole-only model (WholeOnly) refuses every
// range of its layers but the whole one, with the reason, and that a
// stage slice of its file is refused at load, with the reason.
func refusesRanges(t *testing.T, m *Model, full string) {
	t.Helper()
	arch, n := m.Info().Arch, m.Info().Layers
	why := WholeOnly(arch)
	if why == "" || SliceRefused(arch) == "" {
		t.Fatalf("%s: not whole-only (%q) or its slices not refused (%q)", arch, why, SliceRefused(arch))
	}
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, r := range [][2]int{{0, n / 2}, {n / 2, n}, {1, n}} {
		var tokens []int32
		var hidden []float32
		if r[0] == 0 {
			tokens = splitPrompt
		} else {
			hidden = make([]float32, m.Info().Hidden)
		}
		_, err := s.RunRange(context.Background(), r[0], r[1], tokens, hidden)
		if !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), "altup.num_inputs streams") {
			t.Errorf("%s: layers %v: %v, want ErrBadRange saying why", arch, r, err)
		}
	}
	if s.Pos() != 0 {
		t.Errorf("refused ranges moved the session to %d", s.Pos())
	}
	p := filepath.Join(t.TempDir(), "slice.gguf")
	sliceFile(t, full, p, 0, n/2)
	if _, err := Load(context.Background(), p, Options{Threads: 1}); !errors.Is(err, ErrUnsupportedArch) || !strings.Contains(err.Error(), "runs whole only") {
		t.Errorf("%s stage slice: %v, want it refused with the reason", arch, err)
	}
}

// TestGemma3nWhole: Gemma 3n runs whole: its KV-shared layers keep no KV
// (the estimate counts the others), sessions beside each other give each
// its logits alone, generation answers a chat in Gemma 3n's template and a
// raw prompt, and every other range of layers is refused.
func TestGemma3nWhole(t *testing.T) {
	full := synthFile(t, "gemma3n", "tiny", "f32")
	m := loadT(t, full, Options{Slots: 3, Context: 256})
	n := m.Info().Layers
	shared := gemma3nLayouts["tiny"].shared
	// 256 cells, 2 KV heads of 16 for keys and 16 for values, f16
	if kv, want := m.Memory().KVPerSession, int64((n-shared)*256*2*(16+16)*2); kv != want {
		t.Errorf("KV per session %d bytes, want %d (%d of %d layers keep KV)", kv, want, n-shared, n)
	}
	est, _, err := Estimate(full, Options{Slots: 3, Context: 256})
	if err != nil || est.KVPerSession != m.Memory().KVPerSession {
		t.Errorf("estimated KV %d per session, loaded %d (%v)", est.KVPerSession, m.Memory().KVPerSession, err)
	}
	refusesRanges(t, m, full)

	// sessions stepping at once, batched into one graph
	prompts := [][]int32{splitPrompt, splitPrompt[:5], splitPrompt[:8]}
	alone := make([][]float32, len(prompts))
	sess := make([]*Session, len(prompts))
	for i, p := range prompts {
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		sess[i] = s
		if alone[i], err = s.RunRange(context.Background(), 0, n, p, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Truncate(0); err != nil {
			t.Fatal(err)
		}
	}
	together := make([][]float32, len(prompts))
	done := make(chan error)
	q0 := m.queued.Load()
	computeMu.Lock()
	for i, p := range prompts {
		go func() {
			var err error
			together[i], err = sess[i].RunRange(context.Background(), 0, n, p, nil)
			done <- err
		}()
	}
	waitQueued(t, m, q0+int64(len(prompts)))
	computeMu.Unlock()
	for range prompts {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := range prompts {
		if Greedy(together[i]) != Greedy(alone[i]) {
			t.Errorf("session %d: greedy token beside others %d, alone %d", i, Greedy(together[i]), Greedy(alone[i]))
		}
		sess[i].Close() // Generate takes a slot of its own
	}

	// a token past the per-layer embedding's rows (real files: 262144
	// of a 262400 vocabulary, as remembered) is refused, not handed to
	// ggml, which aborts
	if a := m.a.(gemma3nArch); a.maxToken() != m.Info().VocabSize {
		t.Errorf("per-layer embedding of %d tokens, vocabulary %d", a.maxToken(), m.Info().VocabSize)
	}
	short := loadT(t, full, Options{Slots: 1, Context: 64})
	a := short.a.(gemma3nArch)
	a.perLayerVocab = short.Info().VocabSize - 1
	short.a = a
	s, err := short.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunRange(context.Background(), 0, n, []int32{2, int32(a.perLayerVocab)}, nil); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "per-layer embedding") {
		t.Errorf("token past the per-layer embedding: %v", err)
	}
	s.Close()

	tok := m.Tokenizer()
	if tok.Arch() != "gemma3n" || tok.ChatTemplate().Source != "gguf" {
		t.Errorf("tokenizer of %q, template %+v", tok.Arch(), tok.ChatTemplate())
	}
	msgs := []Message{{Role: "user", Content: "Hi"}}
	if s, err := tok.RenderChat(msgs, ChatOptions{}); err != nil || s != "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n" {
		t.Errorf("chat render %q, %v", s, err)
	}
	for _, req := range []Request{{Messages: msgs, MaxTokens: 6}, {Prompt: "Once upon a time", MaxTokens: 6}} {
		res, err := m.Generate(context.Background(), req, nil)
		if err != nil || len(res.Tokens) == 0 {
			t.Errorf("generate %+v: %v, %d tokens", req, err, len(res.Tokens))
		}
	}
}

// TestGemma3nBadMetadata: a gemma3n header that ollama's gemma3n would
// index past (its per-layer arrays) or whose KV sharing reads no layer is
// refused at load, naming the key.
func TestGemma3nBadMetadata(t *testing.T) {
	full := synthFile(t, "gemma3n", "tiny", "f32")
	for _, c := range []struct {
		key  string
		val  any
		want string
	}{
		{"gemma3n.attention.sliding_window_pattern", []bool{true, false}, "attention.sliding_window_pattern has 2 entries for 6 layers"},
		{"gemma3n.activation_sparsity_scale", []float32{0}, "activation_sparsity_scale has 1 entries for 6 layers"},
		{"gemma3n.attention.shared_kv_layers", uint32(5), "attention.shared_kv_layers 5 of 6 layers"},
		{"gemma3n.altup.active_idx", uint32(4), "altup.active_idx 4"},
		{"gemma3n.altup.num_inputs", uint32(1), "altup.num_inputs 1"},
		{"gemma3n.embedding_length_per_layer_input", uint32(0), "embedding_length_per_layer_input missing"},
	} {
		p := filepath.Join(t.TempDir(), "bad.gguf")
		rewriteHeader(t, full, p, func(g *shards.GGUF) {
			for i := range g.KVs {
				if g.KVs[i].Key == c.key {
					g.KVs[i].Value = c.val
				}
			}
		})
		_, err := Load(context.Background(), p, Options{Threads: 1})
		if !errors.Is(err, ErrNotGGUF) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s = %v: %v, want ErrNotGGUF saying %q", c.key, c.val, err, c.want)
		}
	}
}

// TestGemma3nSharedKVAsFloat: a Gemma 3n header whose
// attention.shared_kv_layers is a float32 holding a whole number (as
// llama.cpp's converter wrote hub files) runs as the same file with the
// integer: the same KV estimate and the same greedy tokens; a fraction is
// refused naming the key.
func TestGemma3nSharedKVAsFloat(t *testing.T) {
	full := synthFile(t, "gemma3n", "tiny", "f32")
	asFloat := func(v float32) string {
		p := filepath.Join(t.TempDir(), "float.gguf")
		rewriteHeader(t, full, p, func(g *shards.GGUF) {
			for i := range g.KVs {
				if g.KVs[i].Key == "gemma3n.attention.shared_kv_layers" {
					g.KVs[i].Type, g.KVs[i].Value = shards.TypeFloat32, v
				}
			}
		})
		return p
	}
	greedy := func(path string) ([]int32, Memory) {
		t.Helper()
		m, err := Load(context.Background(), path, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		res, err := m.Generate(context.Background(), Request{Prompt: "Once upon a time", MaxTokens: 12}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens, m.Memory()
	}
	want, wantMem := greedy(full)
	got, gotMem := greedy(asFloat(3))
	if !slices.Equal(got, want) || gotMem.KVPerSession != wantMem.KVPerSession {
		t.Errorf("shared_kv_layers as float32 3: tokens %v, KV per session %d; with the integer: %v, %d", got, gotMem.KVPerSession, want, wantMem.KVPerSession)
	}
	if _, err := Load(context.Background(), asFloat(2.5), Options{Threads: 1}); !errors.Is(err, ErrNotGGUF) || !strings.Contains(err.Error(), "shared_kv_layers 2.5 is not a count of layers") {
		t.Errorf("shared_kv_layers 2.5: %v, want ErrNotGGUF naming it", err)
	}
}
