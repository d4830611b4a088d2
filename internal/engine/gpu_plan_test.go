package engine

import (
	"slices"
	"testing"
)

// TestPlanOffload: which layers Load puts on a GPU, for devices of given
// memory (the plan reads only their figures): the last layers first, each
// with its KV for every slot, while they fit beside the compute reserve;
// the head only when every layer went; GPULayers and GPUMemory bound it;
// what loaded models hold is counted; the device with the most left wins.
func TestPlanOffload(t *testing.T) {
	path := synthFile(t, "qwen3", "small", "q8_0")
	meta, err := checkFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Context: 256}
	opts.defaults(int(meta.KV().ContextLength()))
	opts.GPULayers = GPULayersAll
	all := planOffload(meta, opts, []Device{{Name: "big", Total: 64 << 30, Free: 64 << 30}})
	L := int(meta.KV().BlockCount())
	if len(all.Layers) != L || !all.Head || all.Device.Name != "big" || all.KVPerSession <= 0 {
		t.Fatalf("a big GPU: %+v, want all %d layers and the head", all, L)
	}
	hidden, heads := int64(meta.KV().Uint("embedding_length")), int64(meta.KV().Uint("attention.head_count"))
	var vocab, perLayer int64 // the small shape's layers are alike
	for _, tn := range meta.Tensors().Items() {
		if tn.Name == "token_embd.weight" {
			vocab = int64(tn.Shape[1])
		}
		if i, ok := blockOf(tn.Name); ok && i == L-1 {
			perLayer += int64(tn.Size())
		}
	}
	reserve := gpuReserve(opts, hidden, vocab, heads)
	kv := all.KVPerSession / int64(L) * int64(opts.Slots)
	room := func(layers int) uint64 { return uint64(reserve + int64(layers)*(perLayer+kv) + perLayer/2) }

	for _, c := range []struct {
		name    string
		opts    func(o *Options)
		devs    []Device
		held    map[string]int64
		want    []int
		head    bool
		device  string
		nothing bool
	}{
		{name: "none asked", opts: func(o *Options) { o.GPULayers = 0 }, devs: []Device{{Name: "big", Total: 64 << 30, Free: 64 << 30}}, nothing: true},
		{name: "no device", devs: nil, nothing: true},
		{name: "three fit", devs: []Device{{Name: "small", Total: room(3), Free: room(3)}}, want: []int{L - 3, L - 2, L - 1}, device: "small"},
		{name: "at most two", opts: func(o *Options) { o.GPULayers = 2 }, devs: []Device{{Name: "big", Total: 64 << 30, Free: 64 << 30}},
			want: []int{L - 2, L - 1}, device: "big"},
		{name: "gpu_memory bounds", opts: func(o *Options) { o.GPUMemory = int64(room(1)) }, devs: []Device{{Name: "big", Total: 64 << 30, Free: 64 << 30}},
			want: []int{L - 1}, device: "big"},
		{name: "held by loaded models", devs: []Device{{Name: "shared", Total: room(4), Free: room(4)}}, held: map[string]int64{"shared": int64(room(4) - room(2))},
			want: []int{L - 2, L - 1}, device: "shared"},
		{name: "the device with most left", devs: []Device{{Name: "a", Total: room(1), Free: room(1)}, {Name: "b", Total: room(2), Free: room(2)}},
			want: []int{L - 2, L - 1}, device: "b"},
		{name: "free below total", devs: []Device{{Name: "busy", Total: 64 << 30, Free: room(1)}}, want: []int{L - 1}, device: "busy"},
		{name: "not even the reserve", devs: []Device{{Name: "tiny", Total: uint64(reserve), Free: uint64(reserve)}}, nothing: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := opts
			o.GPULayers = GPULayersAll
			if c.opts != nil {
				c.opts(&o)
			}
			for d, n := range c.held {
				gpuTake(d, n)
				t.Cleanup(func() { gpuTake(d, -n) })
			}
			got := planOffload(meta, o, c.devs)
			if c.nothing {
				if got.Device != nil || len(got.Layers) > 0 || got.gpuLayers(L) != nil {
					t.Fatalf("%+v, want nothing on a GPU", got)
				}
				return
			}
			if got.Device == nil || got.Device.Name != c.device || !slices.Equal(got.Layers, c.want) || got.Head != c.head {
				t.Fatalf("%+v, want layers %v (head %v) on %s", got, c.want, c.head, c.device)
			}
			gl := got.gpuLayers(L)
			if len(gl) != 1 || !slices.Equal(gl[0].Layers, c.want) {
				t.Fatalf("ollama's list %v, want layers %v", gl, c.want)
			}
		})
	}
}
