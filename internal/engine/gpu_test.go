package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// vulkanEnv is the variable scripts/test.sh names the built Vulkan backend's
// folder in (scripts/build-vulkan.sh); TestMain loads it, with Mesa's
// software GPU (llvmpipe) made visible, so GPU tests run on any machine.
// (internal/gputest does this for the other packages; it imports the
// engine, so the engine's own tests cannot use it.)
const vulkanEnv = "SWARM_VULKAN_LIB"

// setupVulkan loads the Vulkan backend for the test binary where
// SWARM_VULKAN_LIB names it (TestMain, before any model loads).
func setupVulkan() error {
	lib := os.Getenv(vulkanEnv)
	if lib == "" {
		return nil
	}
	if os.Getenv("GGML_VK_VISIBLE_DEVICES") == "" {
		// ggml-vulkan skips CPU-type devices unless named: llvmpipe is one.
		os.Setenv("GGML_VK_VISIBLE_DEVICES", "0")
	}
	_, err := InitBackends(lib)
	return err
}

// vulkanDevice is the GPU the test runs on: it skips where SWARM_VULKAN_LIB
// is unset (a plain go test; make test sets it) and fails where the backend
// named gave no device.
func vulkanDevice(t testing.TB) Device {
	t.Helper()
	if os.Getenv(vulkanEnv) == "" {
		t.Skip(vulkanEnv + " unset: make test builds the Vulkan backend (scripts/build-vulkan.sh) and names it there")
	}
	devs := Devices()
	if len(devs) == 0 {
		t.Fatalf("%s=%s gave no GPU: %v", vulkanEnv, os.Getenv(vulkanEnv), loadBackends("").Warnings)
	}
	return devs[0]
}

// TestGPUOffloadMatchesCPU runs the small q8_0 and q4_k models with every
// layer and the head on the Vulkan backend, and with some layers only,
// beside the same file on the CPU: fed the CPU's greedy tokens, each step's
// logits are within the bound below of the CPU's, and a step whose token
// differs is a near tie.
func TestGPUOffloadMatchesCPU(t *testing.T) {
	dev := vulkanDevice(t)
	t.Logf("device: %s", dev)
	// Every model stays loaded to the test's end: Mesa 22.3's lavapipe
	// corrupts its heap when a GPU model is freed and another then runs
	// (docs/gpu.md, "Known problems").
	type pair struct {
		name string
		cpu  *Model
		gpus map[int]*Model
	}
	var pairs []pair
	for _, arch := range []string{"llama", "qwen3"} {
		for _, typ := range []string{"q8_0", "q4_k"} {
			path := synthFile(t, arch, "small", typ)
			p := pair{name: arch + "-" + typ, cpu: loadT(t, path, Options{Context: 256}), gpus: map[int]*Model{}}
			L := p.cpu.Info().Layers
			for _, n := range []int{GPULayersAll, L / 2} {
				p.gpus[n] = loadT(t, path, Options{Context: 256, GPULayers: n})
			}
			pairs = append(pairs, p)
		}
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			L := p.cpu.Info().Layers
			for _, n := range []int{GPULayersAll, L / 2} {
				gpu := p.gpus[n]
				off := gpu.Memory().GPU
				wantLayers := L
				if n > 0 {
					wantLayers = n
				}
				if off.Device == nil || len(off.Layers) != wantLayers || off.Head != (n == GPULayersAll) || off.Weights <= 0 {
					t.Fatalf("GPULayers %d: offload %+v, want %d layers (head %v)", n, off, wantLayers, n == GPULayersAll)
				}
				// each layer's KV is on the device of its layer
				if hostKV := gpu.Memory().KVPerSession; off.KVPerSession <= 0 || hostKV+off.KVPerSession != p.cpu.Memory().KVPerSession {
					t.Fatalf("GPULayers %d: KV a session %d on the GPU + %d on the host, want %d in all", n, off.KVPerSession, hostKV, p.cpu.Memory().KVPerSession)
				}
				if off.Layers[len(off.Layers)-1] != L-1 {
					t.Fatalf("GPULayers %d: layers %v, want the last ones", n, off.Layers)
				}
				if p.cpu.Memory().Weights-gpu.Memory().Weights < off.Weights*9/10 {
					t.Fatalf("GPULayers %d: host weights %d against the CPU model's %d: the %d on the GPU are not off the host",
						n, gpu.Memory().Weights, p.cpu.Memory().Weights, off.Weights)
				}
				worst := compareSteps(t, p.cpu, gpu, 24)
				t.Logf("GPULayers %d (%s): worst step's max |logit d| / max |logit| %.2e", n, gpu.Backend(), worst)
			}
		})
	}
}

// compareSteps feeds both models the first's greedy tokens for steps
// steps and returns the worst step's relative logit difference; it fails
// past gpuLogitBound or on a token that differs without a near tie.
func compareSteps(t *testing.T, ref, got *Model, steps int) float64 {
	t.Helper()
	sa, err := ref.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	sb, err := got.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	L := ref.Info().Layers
	in := splitPrompt
	worst := 0.0
	for step := range steps {
		want, err := sa.RunRange(context.Background(), 0, L, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		have, err := sb.RunRange(context.Background(), 0, L, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := maxAbsDiff(have, want)
		worst = max(worst, d/maxAbs(want))
		g, w := Greedy(have), Greedy(want)
		if d > gpuLogitBound*maxAbs(want) || (g != w && float64(want[w]-want[g]) > 2*d) {
			t.Fatalf("step %d: token %d (reference logit %g), reference %d (%g); max |logit d| %g of max |logit| %g",
				step, g, want[g], w, want[w], d, maxAbs(want))
		}
		in = []int32{w}
	}
	return worst
}

// gpuLogitBound is the most a GPU's logits may differ from the CPU's,
// relative to the largest logit (measured: see TestGPUOffloadMatchesCPU's
// log and docs/gpu.md).
const gpuLogitBound = 0.05

func TestInitBackendsRefusesOtherFolders(t *testing.T) {
	_, err := InitBackends(t.TempDir())
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "lib/ollama") {
		t.Fatalf("a folder not ending in lib/ollama: %v", err)
	}
}
