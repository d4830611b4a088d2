package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/gputest"
)

// trainedF32 is the trained documentation model (internal/engine/testdata):
// decisive logits, so that a GPU's other rounding keeps its greedy text.
const trainedF32 = "../internal/engine/testdata/trained/docs-llama-f32.gguf"

// gpuConfig writes a config whose engine loads GPU backends from lib.
func gpuConfig(t *testing.T, lib string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"engine": map[string]any{"gpu_libs": lib}, "pipeline": map[string]any{"spot_check": 1}})
	p := filepath.Join(t.TempDir(), "gpu.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGPUStageInCPUSwarm: a swarmd whose Vulkan backend (lavapipe in make
// test) holds the second half of the trained model serves a CPU
// originator holding the first: it reports its GPU (status, ps, its
// record: platform gpus, arch +vulkan, the shard's backend), the route's
// hops name their backends, the answer's tokens are one CPU daemon's, and
// the originator's challenge of the GPU peer passes.
func TestGPUStageInCPUSwarm(t *testing.T) {
	lib := gputest.Lib(t)
	want, prompt := trainedTokens(t)
	a := startDaemon(t, "", "--no-mdns", "--threads", "1", "--config", gpuConfig(t, lib), "--gpu-layers", "0",
		"--shard", trainedF32+":0-2")
	g := &daemon{t: t, dir: t.TempDir(), env: []string{gputest.VisibleEnv + "=0"}}
	shareKey(t, g.dir, nil)
	g.args = []string{"--data", g.dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--log-level", "debug",
		"--no-mdns", "--threads", "1", "--config", gpuConfig(t, lib), "--bootstrap", a.bootstrapAddr(), "--shard", trainedF32 + ":2-4"}
	g.start()
	t.Cleanup(g.kill)
	gID := g.peerID()

	var ps client.PS
	eventually(t, 30*time.Second, "the GPU peer's shard loaded", func() bool {
		g.ctlJSON(&ps, "ps")
		return len(ps.Models) == 1
	})
	if len(ps.Models) != 1 || ps.Models[0].Backend != "Vulkan 2/2+head" || ps.Models[0].GPUWeightsBytes <= 0 {
		t.Fatalf("the GPU peer's ps: %+v", ps.Models)
	}
	var st client.Status
	g.ctlJSON(&st, "status")
	if len(st.GPU.Devices) == 0 || st.GPU.Devices[0].Backend != "Vulkan" || st.GPU.Devices[0].HeldBytes <= 0 {
		t.Fatalf("the GPU peer's status: %+v", st.GPU)
	}
	out, _, code := g.ctl("status")
	if code != 0 || !strings.Contains(out, "Vulkan Vulkan0: llvmpipe") {
		t.Fatalf("swarmctl status (exit %d) shows no GPU row:\n%s", code, out)
	}
	var stA client.Status
	a.ctlJSON(&stA, "status")
	if stA.GPU.Layers != 0 {
		t.Fatalf("the CPU peer (--gpu-layers 0) status: %+v", stA.GPU)
	}

	waitHolders(t, a, 2)
	if arch := peerArch(t, a, gID); !strings.HasSuffix(arch, "+vulkan") {
		t.Fatalf("the GPU peer announces arch %q, want its build's +vulkan", arch)
	}
	var peers client.Peers
	a.ctlJSON(&peers, "peers")
	for _, p := range peers.Peers {
		if p.PeerID == gID && (len(p.Platform.GPUs) != 1 || len(p.Shards) != 1 || p.Shards[0].Backend != "Vulkan 2/2+head") {
			t.Fatalf("the GPU peer's record as the originator sees it: gpus %+v, shards %+v", p.Platform.GPUs, p.Shards)
		}
	}

	var res struct {
		Pipeline struct {
			Tokens []int32
			Hops   []struct{ Peer, Backend string }
		}
	}
	// The first answer through the GPU stage waits for the originator's
	// challenge of it, whose first graphs on llvmpipe compile their
	// shaders on the CPU: 27 s once under make test's parallel packages.
	a.ctlJSONWithin(2*time.Minute, &res, append(trainedAsk, prompt)...)
	p := res.Pipeline
	if len(p.Hops) != 2 || p.Hops[1].Peer != gID || p.Hops[1].Backend != "Vulkan 2/2+head" || p.Hops[0].Backend != "CPU" {
		t.Fatalf("route %+v: want the CPU originator, then the GPU peer %s", p.Hops, gID)
	}
	if !slices.Equal(p.Tokens, want) {
		t.Fatalf("tokens through the GPU stage differ from one CPU daemon's:\n got %v\nwant %v", p.Tokens, want)
	}
	relErr, ok := challengeErr(a, gID)
	if !ok {
		t.Fatalf("the originator logged no passed challenge of the GPU peer:\n%s", tail(a.log.String(), 40))
	}
	noLiarLogged(t, a)
	t.Logf("%d tokens through a Vulkan stage equal one CPU daemon's; challenge of the GPU peer: worst relative error per layer %.3g",
		len(want), relErr)
}

// trainedAsk asks a pipeline for the trained model's greedy raw text (it
// has no chat template).
var trainedAsk = []string{"complete", "--dtype", "f32", "--max-tokens", "24"}

// trainedTokens is one CPU daemon's answer to the trained model's prompt.
func trainedTokens(t *testing.T) ([]int32, string) {
	t.Helper()
	const prompt = "The originator"
	d := startDaemon(t, "", "--no-mdns", "--threads", "1", "--shard", trainedF32+":0-4")
	defer d.kill()
	var res pipeResult
	d.ctlJSON(&res, append(trainedAsk, prompt)...)
	if len(res.Pipeline.Tokens) < 8 {
		t.Fatalf("one CPU daemon answered %d tokens", len(res.Pipeline.Tokens))
	}
	return res.Pipeline.Tokens, prompt
}

// TestGPUBackendMissingLoader: where the Vulkan backend's library is found
// but the Vulkan loader it needs is not (hidden here in a mount namespace
// of the daemon's own), swarmd says why in its log and its status, and
// serves on the CPU.
func TestGPUBackendMissingLoader(t *testing.T) {
	lib := gputest.Lib(t)
	loader := "/usr/lib/x86_64-linux-gnu/libvulkan.so.1"
	if _, err := os.Stat(loader); err != nil {
		t.Skipf("no Vulkan loader at %s to hide: %v", loader, err)
	}
	hide := fmt.Sprintf(`mount --bind /dev/null %s && exec "$0" "$@"`, loader)
	d := startDaemonExe(t, []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", hide, filepath.Join(bin, "swarmd")},
		"--no-mdns", "--threads", "1", "--config", gpuConfig(t, lib), "--shard", trainedF32+":0-4")
	var st client.Status
	d.ctlJSON(&st, "status")
	warned := ""
	for _, w := range st.Warnings {
		if strings.Contains(w, "libggml-vulkan.so did not load") && strings.Contains(w, "libvulkan.so.1") && strings.Contains(w, "running on the CPU") {
			warned = w
		}
	}
	if warned == "" || len(st.GPU.Devices) != 0 {
		t.Fatalf("status warnings %q, devices %+v: want the loader's failure named and no device", st.Warnings, st.GPU.Devices)
	}
	if !strings.Contains(d.log.String(), "did not load") {
		t.Fatalf("the log does not say the backend did not load:\n%s", tail(d.log.String(), 30))
	}
	var ps client.PS
	eventually(t, 30*time.Second, "the shard loaded", func() bool {
		d.ctlJSON(&ps, "ps")
		return len(ps.Models) == 1
	})
	if ps.Models[0].Backend != "CPU" {
		t.Fatalf("ps: %+v, want the shard on the CPU", ps.Models)
	}
	var res pipeResult
	d.ctlJSON(&res, append(trainedAsk, "The originator")...)
	if len(res.Pipeline.Tokens) == 0 {
		t.Fatal("no answer on the CPU")
	}
	t.Logf("warning: %s", warned)
}
