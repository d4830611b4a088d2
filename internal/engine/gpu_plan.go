package engine

import (
	"fmt"
	"strings"
	"sync"

	fsggml "github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/ml"
)

// GPULayersAll asks Load for as many of a file's layers on the GPU as fit
// (Options.GPULayers).
const GPULayersAll = -1

// Offload is where a model's layers run: which of them, on which GPU, and
// what they hold there. The zero value is a model wholly on the CPU.
type Offload struct {
	// Device is the GPU (nil: none).
	Device *Device `json:"device,omitempty"`
	// Layers are the file's layers on it, ascending (the last layers of
	// the file, which a hidden state reaches last).
	Layers []int `json:"layers,omitempty"`
	// Head: the output head (norm and matrix) is on it too (when every
	// layer is).
	Head bool `json:"head,omitempty"`
	// Weights and KVPerSession are the bytes on the GPU (Memory's are
	// the host's).
	Weights      int64 `json:"weights_bytes,omitempty"`
	KVPerSession int64 `json:"kv_per_session_bytes,omitempty"`
}

// Backend names where the model's layers run: "CPU", or the GPU backend
// ("Vulkan") with the share of layers on it ("Vulkan 28/28+head").
func (o Offload) Backend(fileLayers int) string {
	if o.Device == nil || len(o.Layers) == 0 {
		return "CPU"
	}
	s := fmt.Sprintf("%s %d/%d", o.Device.Backend, len(o.Layers), fileLayers)
	if o.Head {
		s += "+head"
	}
	return s
}

// Backend names where the model's layers run: "CPU", or the GPU backend
// with the share of the file's layers on it ("Vulkan 28/28+head").
func (m *Model) Backend() string {
	return m.mem.GPU.Backend(m.info.LayerRange[1] - m.info.LayerRange[0])
}

// gpuHeld is the bytes the process's loaded models hold on each device
// (by Device.Name): a driver may report a device's free memory without
// what this process has taken (no memory budget extension).
var gpuHeld struct {
	mu sync.Mutex
	by map[string]int64
}

func gpuTake(dev string, n int64) {
	gpuHeld.mu.Lock()
	defer gpuHeld.mu.Unlock()
	if gpuHeld.by == nil {
		gpuHeld.by = map[string]int64{}
	}
	gpuHeld.by[dev] += n
}

// GPUHeld is the bytes the process's loaded models hold on the device
// named (Device.Name).
func GPUHeld(dev string) int64 { return gpuHeldOn(dev) }

func gpuHeldOn(dev string) int64 {
	gpuHeld.mu.Lock()
	defer gpuHeld.mu.Unlock()
	return gpuHeld.by[dev]
}

// gpuReserve is what a device keeps free beside a model's weights and KV:
// the compute graph's buffers, as the model reserves them for its largest
// graph (Batch positions over every cell of the cache: the attention
// scores, f32, dominate; then activations and logits), and the driver's
// own, with room.
func gpuReserve(opts Options, hidden, vocab, heads int64) int64 {
	cells := int64(max(opts.Slots, 1)) * int64((opts.Context+255)/256*256)
	if opts.Isolated {
		cells = int64((opts.Context + 255) / 256 * 256)
	}
	batch := int64(opts.Batch)
	return 256<<20 + 4*batch*(vocab+16*hidden) + 4*batch*cells*max(heads, 1)
}

// planOffload picks the layers of meta (the file at path) that go to a
// GPU under opts: none where opts.GPULayers is 0 or no backend found a
// device; otherwise, on the device with the most memory left, the file's
// last layers, one by one with their KV for opts.Slots sessions, while
// they fit and at most opts.GPULayers of them (all for GPULayersAll), and
// the head after them when every layer went. opts has its defaults.
func planOffload(meta *fsggml.GGML, opts Options, devs []Device) Offload {
	if opts.GPULayers == 0 || len(devs) == 0 {
		return Offload{}
	}
	kv := meta.KV()
	hidden := int64(kv.Uint("embedding_length"))
	var vocab int64 // the embedding's rows (the header's vocabulary may be unread)
	layerBytes := map[int]int64{}
	var head, embed int64
	tied := true
	for _, t := range meta.Tensors().Items() {
		if i, ok := blockOf(t.Name); ok {
			layerBytes[i] += int64(t.Size())
			continue
		}
		switch {
		case t.Name == "token_embd.weight":
			embed = int64(t.Size())
			if len(t.Shape) == 2 {
				vocab = int64(t.Shape[1])
			}
		case onOutputDevice(t.Name):
			head += int64(t.Size())
			if strings.HasPrefix(t.Name, "output.") {
				tied = false
			}
		}
	}
	if tied {
		head += embed // the backend copies the embedding as the output matrix
	}
	var layers []int
	for i := range int(kv.BlockCount()) {
		if layerBytes[i] > 0 {
			layers = append(layers, i)
		}
	}
	kvLayer, _ := kvPerSession(kv, hidden, 1, opts.Context)
	slots := int64(max(opts.Slots, 1))
	best, room := -1, int64(0)
	for i, d := range devs {
		held := gpuHeldOn(d.Name)
		left := min(int64(d.Free), int64(d.Total)-held)
		if opts.GPUMemory > 0 {
			left = min(left, opts.GPUMemory-held)
		}
		left -= gpuReserve(opts, hidden, vocab, int64(kv.Uint("attention.head_count")))
		if left > room {
			best, room = i, left
		}
	}
	if best < 0 {
		return Offload{}
	}
	dev := devs[best]
	o := Offload{Device: &dev}
	want := len(layers)
	if opts.GPULayers > 0 {
		want = min(want, opts.GPULayers)
	}
	for k := len(layers) - 1; k >= 0 && len(o.Layers) < want; k-- {
		w, c := layerBytes[layers[k]], kvLayer*slots
		if o.Weights+w+o.KVPerSession*slots+c > room {
			break
		}
		o.Layers = append([]int{layers[k]}, o.Layers...)
		o.Weights += w
		o.KVPerSession += kvLayer
	}
	if len(o.Layers) == len(layers) && head > 0 && o.Weights+head+o.KVPerSession*slots <= room {
		o.Head = true
		o.Weights += head
	}
	if len(o.Layers) == 0 {
		return Offload{}
	}
	return o
}

// onOutputDevice: ollama's backend puts the tensor named with the output
// head, on the device of the layer after the last (ml/backend/ggml.New).
func onOutputDevice(name string) bool {
	for _, part := range strings.Split(name, ".") {
		switch part {
		case "cls", "output", "output_norm", "altup_proj", "altup_unembd_proj",
			"per_layer_token_embd", "per_layer_model_proj", "per_layer_proj_norm":
			return true
		}
	}
	return false
}

// gpuLayers is o as ollama's backend takes it (blocks: the file's
// block_count, the head's index).
func (o Offload) gpuLayers(blocks int) ml.GPULayersList {
	if o.Device == nil {
		return nil
	}
	ls := append([]int(nil), o.Layers...)
	if o.Head {
		ls = append(ls, blocks)
	}
	return ml.GPULayersList{{DeviceID: ml.DeviceID{ID: o.Device.ID, Library: o.Device.library}, Layers: ls}}
}
