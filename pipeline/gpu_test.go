package pipeline

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/gputest"
	"github.com/llmswarm/llmswarm/shards"
)

// TestGPUStageRoute runs the trained documentation model (f32 and q8_0) on
// a route of two stages, the first on the CPU and the second, with the
// head, on the Vulkan backend (lavapipe in make test): the mixed route
// writes llama.cpp's text character for character, as the all-CPU route
// does (TestTrainedWeightsRoute), and its hop stats name each hop's
// backend as its stage announces it.
func TestGPUStageRoute(t *testing.T) {
	gputest.Device(t)
	dir, doc := trainedDir, llamaCompletions(t)
	// Every route is set up before any runs and lives to the test's end:
	// Mesa 22.3's lavapipe corrupts its heap when a GPU model is freed and
	// another then runs (docs/gpu.md).
	type route struct {
		o        *Originator
		cpu, gpu *stagePeer
	}
	routes := map[string]route{}
	for _, r := range doc.Completions {
		if _, ok := routes[r.File]; ok {
			continue
		}
		full := filepath.Join(dir, r.File)
		_, _, c, err := shards.BuildManifest(full)
		if err != nil {
			t.Fatal(err)
		}
		cpu, gpu := newStagePeer(t), newStagePeer(t)
		gpu.gpu = true
		cpu.serveFile(t, full, c.String(), 0, 2)
		gpu.serveFile(t, full, c.String(), 2, 4)
		if got := gpu.srv.Local()[0].Model.Backend(); got != "Vulkan 2/2+head" {
			t.Fatalf("%s: the GPU stage runs on %q, want Vulkan 2/2+head", r.File, got)
		}
		routes[r.File] = route{originatorForFile(t, full, newStagePeer(t), cpu, gpu), cpu, gpu}
	}
	// and a synthetic q4_k model (the small qwen3 shape), where the
	// Vulkan stage's greedy tokens are the CPU's but at near ties
	q4, q4cid := modelOf(t, "qwen3", "small", "q4_k")
	q4cpu, q4gpu := newStagePeer(t), newStagePeer(t)
	q4gpu.gpu = true
	q4cpu.serveFile(t, q4, q4cid, 0, 4)
	q4gpu.serveFile(t, q4, q4cid, 4, 8)
	q4o := originatorForFile(t, q4, newStagePeer(t), q4cpu, q4gpu)
	keep := t // GPU models close at the end of the whole test
	for _, r := range doc.Completions {
		t.Run(fmt.Sprintf("%s/%s", r.File, r.Prompt), func(t *testing.T) {
			rt := routes[r.File]
			res, err := rt.o.Generate(t.Context(), Request{Prompt: r.Prompt, MaxTokens: r.N})
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != r.Text {
				// Allowed only where the CPU's pick was a near tie.
				one := referenceOne(t, filepath.Join(dir, r.File), r.Prompt, r.N)
				if one.Text != r.Text {
					t.Fatalf("one machine on the CPU %q, llama.cpp %q", one.Text, r.Text)
				}
				gap, diff := nearTie(t, keep, filepath.Join(dir, r.File), r.Prompt, one.Tokens, res.Tokens)
				t.Logf("route with a GPU stage %q, llama.cpp %q: they part at a near tie (the CPU's two picks %.3g apart, the GPU's logits up to %.3g off the CPU's)",
					res.Text, r.Text, gap, diff)
			}
			want := map[string]string{rt.cpu.h.ID().String(): "CPU", rt.gpu.h.ID().String(): "Vulkan 2/2+head"}
			if len(res.Hops) != 2 {
				t.Fatalf("%d hops, want 2", len(res.Hops))
			}
			for _, h := range res.Hops {
				if h.Backend != want[h.Peer] {
					t.Fatalf("hop [%d,%d) on %q, want %q", h.Start, h.End, h.Backend, want[h.Peer])
				}
			}
		})
	}
	t.Run("qwen3-small-q4_k", func(t *testing.T) {
		for _, prompt := range []string{"The swarm", "A peer"} {
			res, err := q4o.Generate(t.Context(), Request{Prompt: prompt, MaxTokens: 16})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Hops) != 2 || res.Hops[1].Backend != "Vulkan 4/4+head" || res.Hops[0].Backend != "CPU" {
				t.Fatalf("hops %+v, want a CPU stage then a Vulkan one", res.Hops)
			}
			one := referenceOne(t, q4, prompt, 16)
			if sameTokens(res.Tokens, one.Tokens) {
				t.Logf("%q: %d tokens equal to the CPU's", prompt, len(one.Tokens))
				continue
			}
			gap, diff := nearTie(t, keep, q4, prompt, one.Tokens, res.Tokens)
			t.Logf("%q: parts from the CPU's tokens at a near tie (the CPU's two picks %.3g apart, the GPU's logits up to %.3g off)", prompt, gap, diff)
		}
	})
}

// nearTie finds the first token where got parts from want (the CPU's
// greedy tokens after prompt) and checks that the CPU's choice there was a
// near tie: the gap between the CPU's logits of its pick and of got's is
// at most twice the largest difference between the CPU's and the GPU's
// logits at that step (whole models of the file, CPU and Vulkan, closed
// when keep ends).
func nearTie(t, keep *testing.T, full, prompt string, want, got []int32) (gap, diff float64) {
	t.Helper()
	k := 0
	for k < len(want) && k < len(got) && want[k] == got[k] {
		k++
	}
	if k == len(want) || k == len(got) {
		t.Fatalf("texts differ, tokens %v and %v do not", want, got)
	}
	var logits [2][]float32
	for i, n := range []int{0, engine.GPULayersAll} {
		m, err := engine.Load(t.Context(), full, engine.Options{Slots: 1, Context: 256, GPULayers: n})
		if err != nil {
			t.Fatal(err)
		}
		keep.Cleanup(func() { m.Close() }) // see TestGPUStageRoute
		in, err := m.Tokenizer().Encode(prompt, true)
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		// as a generation runs: the prompt, then one token a step
		for step := 0; step <= k; step++ {
			if step > 0 {
				in = want[step-1 : step]
			}
			if logits[i], err = s.RunRange(t.Context(), 0, m.Info().Layers, in, nil); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
	}
	cpu, gpu := logits[0], logits[1]
	if engine.Greedy(cpu) != want[k] {
		t.Fatalf("the CPU model picks %d at token %d, its generation %d", engine.Greedy(cpu), k, want[k])
	}
	for i := range cpu {
		diff = max(diff, math.Abs(float64(cpu[i])-float64(gpu[i])))
	}
	gap = float64(cpu[want[k]] - cpu[got[k]])
	if gap > 2*diff {
		t.Fatalf("token %d: the GPU route picks %d, the CPU %d, %.3g apart in the CPU's logits: more than twice the GPU's largest logit difference %.3g",
			k, got[k], want[k], gap, diff)
	}
	return gap, diff
}
