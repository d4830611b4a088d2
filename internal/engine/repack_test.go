package engine

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRepackSameTokens: a q4_k model whose matrix weights run on ggml's
// repacked kernels picks the same greedy tokens as the plain layout, with
// logits that differ by rounding only, for every architecture. The kernels
// sum in another order: one layer's output differs by ~5e-7 relative; over
// 8 random layers an activation now and then lands on the other side of a
// Q8_K rounding step, and the last logits differ by up to ~4% of their
// largest (wrong kernels: ~100%). So a step may pick another token where
// the plain logits are that close to a tie; the test allows that, and no
// more, in at most a tenth of the steps. The test
// binary must be built with the repacked kernels (CGO_CPPFLAGS, as the
// Makefile and scripts/test.sh set it), else it fails saying so.
func TestRepackSameTokens(t *testing.T) {
	if !RepackAvailable() {
		t.Fatal("ggml was built without GGML_USE_CPU_REPACK: build with CGO_CPPFLAGS=-DGGML_USE_CPU_REPACK (make test sets it)")
	}
	for _, arch := range Architectures {
		t.Run(arch, func(t *testing.T) {
			path := synthFile(t, arch, "small", "q4_k")
			plain := loadT(t, path, Options{Context: 256, NoRepack: true})
			packed := loadT(t, path, Options{Context: 256})
			if plain.Repacked() != 0 {
				t.Fatalf("NoRepack model has %d repacked tensors", plain.Repacked())
			}
			// 7 projections per layer (the head is Q6_K, as in Q4_K_M files:
			// no repacked kernel); 5 in LFM2's convolution layers
			want := 7 * packed.Info().Layers
			if arch == "lfm2" {
				want -= 2 * (packed.Info().Layers - len(lfm2AttnLayers["small"]))
			}
			switch arch {
			case "qwen3moe":
				// the experts' gate and up (3-D, MUL_MAT_ID); their down
				// projection is Q8_0 (rows of 128), which has no repacked kernel
				want = 6 * packed.Info().Layers
			case "deepseek2", "glm4moelite":
				// per expert layer attn_output, q_a, kv_a_mqa, the
				// experts' and the shared expert's gate and up; the
				// leading dense layer's first three and its MLP; the
				// projections with rows of 64 or 128 are Q8_0
				want = 7*(packed.Info().Layers-1) + 6
			case "gptoss", "gpt-oss":
				// attention's four and the experts' three (3-D)
				want = 7 * packed.Info().Layers
			case "llama4":
				// a dense layer's seven; a mixture layer's attention, the
				// experts' and the shared expert's gate and up (their down
				// projections are Q8_0, rows of 128): every other layer
				want = 7*packed.Info().Layers/2 + 8*packed.Info().Layers/2
			case "lfm2moe":
				// lfm2's operators (attention four, a convolution two);
				// the leading dense layers' three, the experts' gate and
				// up (their down projection Q8_0, as qwen3moe's)
				want = 0
				for l := range packed.Info().Layers {
					want += 2
					if !lfm2Conv("small", l) {
						want += 2
					}
					want += 2
					if !lfm2MoE("small", l) {
						want++
					}
				}
			case "qwen3next":
				// four projections per layer, attention's or the DeltaNet's
				// (qkv, gate, beta/alpha, out); the experts' and the shared
				// expert's gate and up (their down projections Q8_0)
				want = 8 * packed.Info().Layers
			case "nemotron_h", "nemotron_h_moe":
				// a Mamba-2 layer's input and output projections,
				// attention's four, a feed-forward's up and down; the
				// experts' up and the shared expert's two (the experts'
				// down projection Q8_0, rows of 128)
				want = 0
				for _, c := range nemotronhLayoutOf(arch, "small").pattern {
					want += map[rune]int{'M': 2, '*': 4, '-': 2, 'E': 3}[c]
				}
			}
			if packed.Repacked() != want {
				t.Fatalf("%d tensors repacked, want %d", packed.Repacked(), want)
			}
			sp, err := plain.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			sr, err := packed.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer sr.Close()
			// Both runs are fed the plain run's greedy token. A step where
			// the two pick different tokens must be a near tie: the
			// repacked pick's plain logit within the rounding error of
			// the best.
			//
			// In a mixture of experts a token whose router scores two
			// experts within that rounding takes one in one run and the
			// other in the other: that step's logits then differ by a
			// third or more (gptoss 31% at one step of 32, its first
			// layers agreeing to 1e-7), its token rarely.
			// So there one step's logits are not bounded, only the median
			// step's, as everywhere; wrong kernels give ~100% at every step.
			const steps = 32
			in := splitPrompt
			L := packed.Info().Layers
			bound := 0.1
			if synthExperts[synthArch(arch)] != nil {
				bound = math.Inf(1)
			}
			if arch == "gemma3n" {
				// (its seven repacked projections a layer are the
				// dense families': laurel, the per-layer gate and the
				// AltUp projections are not in repackSuffixes) the AltUp
				// streams, mixed at every layer, carry the rounding
				// further: its median step is ~4% as the others', one
				// step in 32 measured 11% (flat logits, max ~2)
				bound = 0.15
			}
			var rel []float64
			same := 0
			for step := range steps {
				want, err := sp.RunRange(context.Background(), 0, L, in, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := sr.RunRange(context.Background(), 0, L, in, nil)
				if err != nil {
					t.Fatal(err)
				}
				d := maxAbsDiff(got, want)
				rel = append(rel, d/maxAbs(want))
				g, w := Greedy(got), Greedy(want)
				if d > bound*maxAbs(want) || (g != w && float64(want[w]-want[g]) > 2*d) {
					t.Fatalf("step %d: repacked token %d (plain logit %g), plain %d (%g); max |logit d| %g of max |logit| %g",
						step, g, want[g], w, want[w], d, maxAbs(want))
				}
				if g == w {
					same++
				}
				in = []int32{w}
			}
			// Each step that disagrees is a near tie (above); a mixture of
			// experts with absorbed latent attention (glm4moelite small:
			// flat logits, max about 4) has more of them: 27 of 32 agreed.
			agree := steps * 9 / 10
			if synthExperts[synthArch(arch)] != nil {
				agree = steps * 3 / 4
			}
			if same < agree {
				t.Fatalf("only %d of %d greedy steps agree (want %d)", same, steps, agree)
			}
			slices.Sort(rel)
			if med := rel[steps/2]; med > 0.1 {
				t.Fatalf("median step's max |logit d| / max |logit| %.2g (rounding: a few %%)", med)
			}
			worst := rel[steps-1]
			t.Logf("%d tensors repacked; %d of %d greedy steps agree (the others near ties), max |logit d| / max |logit| %.2g, median %.2g",
				packed.Repacked(), same, steps, worst, rel[steps/2])
		})
	}
}

func maxAbs(a []float32) float64 {
	m := 0.0
	for _, v := range a {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// TestGGMLHeadersMatchModule: the ggml headers repack.go compiles with are
// those of the ggml in the ollama module this binary links (an upgrade
// that changes struct ggml_tensor must not go unnoticed).
func TestGGMLHeadersMatchModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "ml", "backend", "ggml", "ggml", "include")
	for _, h := range []string{"ggml.h", "ggml-backend.h", "ggml-alloc.h"} {
		want, err := os.ReadFile(filepath.Join(dir, h))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("ggmlinc", h))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("ggmlinc/%s differs from the module's %s: copy it again", h, filepath.Join(dir, h))
		}
	}
}
