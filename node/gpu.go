package node

import (
	"fmt"
	"strings"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
)

// initGPU loads the GPU backends in engine.gpu_libs (once for the process:
// engine.InitBackends) and says what it found: each device at Info, and
// why a backend found gave none, or why the layers asked of a GPU run on
// the CPU, at Warn and in the peer's warnings.
func (n *Node) initGPU() {
	b, err := engine.InitBackends(n.cfg.Engine.GPULibs)
	if err != nil {
		// the config check refused such a folder; this is ggml's word
		b = engine.Backends{Warnings: []string{err.Error()}}
	}
	for i, w := range b.Warnings {
		n.log.Warn("GPU backend", "problem", w)
		n.health.set(fmt.Sprintf("gpu-%d", i), "GPU: "+w)
	}
	for _, d := range b.Devices {
		n.log.Info("GPU", "backend", d.Backend, "device", d.Name, "name", d.Description,
			"vram", ByteSize(d.Total).String(), "free", ByteSize(d.Free).String())
	}
	if len(b.Devices) == 0 {
		layers := n.cfg.Engine.GPULayers
		if layers != nil && *layers > 0 {
			w := fmt.Sprintf("engine.gpu_layers is %d, but no GPU backend in %s found a device: every layer runs on the CPU (make build-vulkan builds the Vulkan backend there)",
				*layers, strings.Join(b.Dirs, ", "))
			n.log.Warn("GPU", "problem", w)
			n.health.set("gpu-layers", "GPU: "+w)
		} else {
			n.log.Info("no GPU: layers run on the CPU", "looked_in", strings.Join(b.Dirs, ", "), "loaded", b.Loaded)
		}
	}
	n.gpuMu.Lock()
	n.gpu = b
	n.gpuMu.Unlock()
}

// gpuStatus is the GPUs found, with their memory now.
func (n *Node) gpuStatus() client.GPUStatus {
	n.gpuMu.Lock()
	b := n.gpu
	n.gpuMu.Unlock()
	st := client.GPUStatus{Dirs: b.Dirs, Loaded: b.Loaded, Layers: n.cfg.Engine.gpuLayers()}
	if len(b.Devices) == 0 {
		return st
	}
	for _, d := range engine.Devices() {
		st.Devices = append(st.Devices, client.GPUDevice{Backend: d.Backend, Name: d.Name, Description: d.Description,
			TotalBytes: d.Total, FreeBytes: d.Free, HeldBytes: engine.GPUHeld(d.Name)})
	}
	return st
}

// platformGPUs are the GPUs this peer announces.
func (n *Node) platformGPUs() []gossip.GPU {
	n.gpuMu.Lock()
	found := len(n.gpu.Devices) > 0
	n.gpuMu.Unlock()
	if !found {
		return nil
	}
	var out []gossip.GPU
	for _, d := range engine.Devices() {
		out = append(out, gossip.GPU{Backend: d.Backend, Name: d.Description, VRAMBytes: d.Total, FreeVRAM: d.Free})
	}
	return out
}

// gpuComputes names the GPU backend this peer's models run layers on
// ("vulkan"), or "" where every layer runs on the CPU: a stage on a GPU
// rounds otherwise than the CPU's kernels, so its record's arch says so
// (computeArch) and checkers compare it within the bounds across builds.
func (n *Node) gpuComputes() string {
	if n.cfg.Engine.gpuLayers() == 0 {
		return ""
	}
	n.gpuMu.Lock()
	defer n.gpuMu.Unlock()
	if len(n.gpu.Devices) == 0 {
		return ""
	}
	return strings.ToLower(n.gpu.Devices[0].Backend)
}
