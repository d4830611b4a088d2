package engine

import (
	"context"
	"testing"

	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/input"
	"github.com/ollama/ollama/model/models/gemma2"
	"github.com/ollama/ollama/model/models/gemma3"
	"github.com/ollama/ollama/model/models/gemma3n"
	"github.com/ollama/ollama/model/models/gptoss"
	"github.com/ollama/ollama/model/models/lfm2"
	"github.com/ollama/ollama/model/models/llama4"
	"github.com/ollama/ollama/model/models/nemotronh"
	"github.com/ollama/ollama/model/models/olmo3"
	"github.com/ollama/ollama/model/models/qwen3next"
)

// TestWholeMatchesModelForward checks the engine's layer loop against
// ollama's own model.Forward, bit for bit, for every architecture over a
// prompt and 16 decode steps. If an ollama upgrade changes a model's forward
// pass, this fails.
func TestWholeMatchesModelForward(t *testing.T) {
	for _, arch := range Architectures {
		t.Run(arch, func(t *testing.T) {
			matchForward(t, loadT(t, synthFile(t, arch, "tiny", "f32"), Options{Context: 256}), splitPrompt, splitSteps)
		})
	}
}

// matchForward runs prompt and then steps-1 greedy decode steps through
// m's session and through ollama's model.Forward, and wants the same logits
// bit for bit at every step.
func matchForward(t *testing.T, m *Model, prompt []int32, steps int) {
	t.Helper()
	cache := m.m.Config().Cache
	if w, ok := m.a.(ownCache); ok {
		// A sliding-window cache's memory (how far behind the window
		// it keeps cells) decides which cell a new position takes,
		// so the order of attention's sums: model.Forward runs on
		// the cache the engine makes (ollama's runner too gives
		// its cache more memory than the window), and what is
		// compared is the forward pass.
		cache = w.newCache(int32(m.opts.PrefillChunk))
		setCacheForTest(t, m.m, cache)
	}
	cache.Init(m.m.Backend(), ml.DTypeF16, 1, 256, 512)
	defer cache.Close()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := prompt
	var pos int32
	for step := range steps {
		want := ollamaForward(t, m, in, pos)
		got, err := s.RunRange(context.Background(), 0, m.Info().Layers, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bitEqual(got, want) {
			t.Fatalf("step %d: engine logits differ from model.Forward (max |d| %g)", step, maxAbsDiff(got, want))
		}
		pos += int32(len(in))
		in = []int32{Greedy(want)}
	}
}

// setCacheForTest makes c the cache model.Forward uses for om.
func setCacheForTest(t *testing.T, om model.Model, c kvcache.Cache) {
	t.Helper()
	switch m := om.(type) {
	case *gemma3.Model:
		m.Cache = c
	case *lfm2.Model:
		m.Cache = c
	case *gptoss.Transformer:
		m.Cache = c
	case *gemma2.Model:
		m.Cache = c
	case *olmo3.Model:
		m.Cache = c
	case *llama4.Model:
		m.Cache = c
	case *qwen3next.Model:
		m.Cache = c
	case *gemma3n.Model:
		m.Cache = c
	case *nemotronh.Model:
		m.Cache = c
	default:
		t.Fatalf("no cache to set for %T", om)
	}
}

// ollamaForward is the stock path ollama's runner takes: model.Forward over
// the whole model with the model's own cache, logits of the last position.
func ollamaForward(t testing.TB, m *Model, tokens []int32, pos int32) []float32 {
	t.Helper()
	computeMu.Lock()
	defer computeMu.Unlock()
	ctx := m.m.Backend().NewContext()
	defer ctx.Close()
	n := len(tokens)
	b := input.Batch{Positions: make([]int32, n), Sequences: make([]int, n)}
	for i := range b.Positions {
		b.Positions[i] = pos + int32(i)
	}
	b.Inputs = ctx.Input().FromInts(tokens, n)
	b.Outputs = ctx.Input().FromInts([]int32{int32(n - 1)}, 1)
	logits, err := model.Forward(ctx, m.m, b)
	if err != nil {
		t.Fatal(err)
	}
	ctx.Compute(logits)
	return logits.Floats()
}
