package pipeline

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// TestPartitionLargeHead: the head, ~10 layers' worth on Qwen3-0.6B's shape,
// goes to a stage with fewer layers than the others, and the plan's
// bottleneck is the best of every split (brute force).
func TestPartitionLargeHead(t *testing.T) {
	dev := func(id string, ms float64) Device {
		return Device{ID: id, MemBytes: 64 * gib, MsPerLayer: ms, RTTms: 0.5}
	}
	tests := []struct {
		name     string
		devs     []Device
		shape    ModelShape
		wantLast int // layers of the last stage; every other has more
	}{
		{
			// An even 4×7 split: 7+10 layers last. The best: 1+10 last,
			// 27 layers on three stages of at most 11.
			name:     "four equal devices, head of 10 layers",
			devs:     []Device{dev("a", 1), dev("b", 1), dev("c", 1), dev("d", 1)},
			shape:    ModelShape{Layers: 28, LayerBytes: gib, Ends: EndCost{Head: 10}, HeadBytes: 10 * gib},
			wantLast: 1,
		},
		{
			// The 18.8 against 8.6 ms measured: an even split leaves 7 layers
			// and a ~9.9-layer head on the last stage.
			name:     "qwen3-0.6b shape",
			devs:     []Device{dev("a", 1.2), dev("b", 1.2), dev("c", 1.2), dev("d", 1.2)},
			shape:    qwen06Shape(t),
			wantLast: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Partition(tt.devs, tt.shape)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, tt.devs, tt.shape, plan)
			last := plan.Stages[len(plan.Stages)-1]
			if n := last.End - last.Start; n != tt.wantLast || last.HeadMs <= 0 {
				t.Errorf("last stage %+v: %d layers, want %d and a head cost", last, n, tt.wantLast)
			}
			for _, s := range plan.Stages[:len(plan.Stages)-1] {
				if n := s.End - s.Start; n <= tt.wantLast || s.HeadMs != 0 {
					t.Errorf("stage %+v: %d layers, want more than the last stage's %d and no head", s, n, tt.wantLast)
				}
			}
			want, ok := bruteForcePlan(tt.devs, tt.shape)
			if !ok || math.Abs(plan.BottleneckMs-want.bottleneck) > 1e-6 || math.Abs(plan.LatencyMs-want.latency) > 1e-6 {
				t.Errorf("bottleneck %v latency %v, brute force %+v", plan.BottleneckMs, plan.LatencyMs, want)
			}
		})
	}
}

// TestPartitionHeadOnFastDevice: of two devices, the faster runs the head
// even when given second, and the stages come in chain order.
func TestPartitionHeadOnFastDevice(t *testing.T) {
	devs := []Device{{ID: "fast", MemBytes: 64 * gib, MsPerLayer: 1}, {ID: "slow", MemBytes: 64 * gib, MsPerLayer: 2}}
	m := ModelShape{Layers: 12, LayerBytes: gib, Ends: EndCost{Head: 6}}
	plan, err := Partition(devs, m)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, devs, m, plan)
	// slow [0,6) 12 ms, fast [6,12) + head 12 ms.
	if len(plan.Stages) != 2 || plan.Stages[0].Device != "slow" || plan.Stages[1].Device != "fast" ||
		plan.Stages[1].HeadMs != 6 || plan.BottleneckMs != 12 {
		t.Fatalf("stages %+v, bottleneck %v", plan.Stages, plan.BottleneckMs)
	}
}

// TestPartitionEndMemory: the head's bytes count on the last stage only, so
// a device too small for the head with its layers still serves layers.
func TestPartitionEndMemory(t *testing.T) {
	m := ModelShape{Layers: 4, LayerBytes: 100, HeadBytes: 250, EmbedBytes: 50}
	devs := []Device{{ID: "big", MemBytes: 450, MsPerLayer: 1}, {ID: "small", MemBytes: 300, MsPerLayer: 1}}
	plan, err := Partition(devs, m)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, devs, m, plan)
	if last := plan.Stages[len(plan.Stages)-1]; last.Device != "big" || last.End-last.Start != 2 {
		t.Fatalf("stages %+v: want big to run the last 2 layers and the head", plan.Stages)
	}

	// Room for the layers, none for the head beside one.
	_, err = Partition([]Device{{ID: "a", MemBytes: 300, MsPerLayer: 1}, {ID: "b", MemBytes: 300, MsPerLayer: 1}}, m)
	if !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), "output head (250 bytes)") {
		t.Fatalf("err = %v, want ErrDoesNotFit naming the head", err)
	}
}

func TestPartitionBadEnds(t *testing.T) {
	ok := []Device{{ID: "a", MemBytes: 100, MsPerLayer: 1}}
	base := ModelShape{Layers: 4, LayerBytes: 1}
	tests := []struct {
		name    string
		edit    func(*ModelShape)
		wantMsg string
	}{
		{"NaN head", func(m *ModelShape) { m.Ends.Head = math.NaN() }, "output head costs NaN layers' time"},
		{"negative head", func(m *ModelShape) { m.Ends.Head = -1 }, "output head costs -1 layers' time"},
		{"infinite head", func(m *ModelShape) { m.Ends.Head = math.Inf(1) }, "output head costs +Inf"},
		{"huge head", func(m *ModelShape) { m.Ends.Head = 1e9 }, "output head costs 1e+09 layers' time (want 0..1024)"},
		{"NaN embedding", func(m *ModelShape) { m.Ends.Embed = math.NaN() }, "embedding costs NaN"},
		{"negative head bytes", func(m *ModelShape) { m.HeadBytes = -1 }, "-1 bytes of output head"},
		{"huge embedding bytes", func(m *ModelShape) { m.EmbedBytes = math.MaxInt64 }, "bytes of embedding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base
			tt.edit(&m)
			_, err := Partition(ok, m)
			if !errors.Is(err, ErrBadShape) || !strings.HasPrefix(err.Error(), "pipeline: ") || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want ErrBadShape containing %q", err, tt.wantMsg)
			}
		})
	}
}

// testManifest is a manifest of layers whose blocks take layerBytes each,
// a head of headBytes and an embedding of vocab rows of hidden f32.
func testManifest(layers int, layerBytes, headBytes uint64, hidden, vocab uint64) *shards.Manifest {
	m := &shards.Manifest{Layers: layers, Hidden: int(hidden), Vocab: int(vocab)}
	m.Tensors = append(m.Tensors,
		shards.ManifestTensor{Name: "token_embd.weight", Dims: []uint64{hidden, vocab}, Size: 4 * hidden * vocab},
		shards.ManifestTensor{Name: "output_norm.weight", Dims: []uint64{hidden}, Size: 4 * hidden})
	if headBytes > 0 {
		m.Tensors = append(m.Tensors, shards.ManifestTensor{Name: "output.weight", Dims: []uint64{hidden, vocab}, Size: headBytes})
	}
	for l := range layers {
		if layerBytes > 0 {
			m.Tensors = append(m.Tensors, shards.ManifestTensor{Name: fmt.Sprintf("blk.%d.ffn_up.weight", l), Dims: []uint64{layerBytes / 4}, Size: layerBytes})
		}
	}
	return m
}

// qwen06Shape is ShapeFromManifest of Qwen3-0.6B's f32 tensor sizes:
// 15.73M parameters a layer (attention 6.29M, MLP 9.44M, norms), a
// 151936×1024 head.
func qwen06Shape(t *testing.T) ModelShape {
	t.Helper()
	const hidden, vocab, layer = 1024, 151936, 4 * (1024*2048 + 2*1024*1024 + 2048*1024 + 3*1024*3072 + 2*1024 + 2*128)
	s, err := ShapeFromManifest(testManifest(28, layer, 4*hidden*vocab, hidden, vocab))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestShapeFromManifest(t *testing.T) {
	s := qwen06Shape(t)
	if s.Layers != 28 || s.HeadBytes != 4*(1024*151936+1024) || s.EmbedBytes != 4*1024*151936 || s.HiddenBytesPerToken != 2048 {
		t.Fatalf("shape %+v", s)
	}
	if s.Ends.Head < 9.8 || s.Ends.Head > 9.9 || s.Ends.Embed <= 0 || s.Ends.Embed > 1e-3 {
		t.Fatalf("ends %+v: want a head of ~9.9 layers and an embedding row of well under a thousandth", s.Ends)
	}
	// Tied: the embedding counts as the head.
	tied, err := ShapeFromManifest(testManifest(4, 1000, 0, 8, 100))
	if err != nil || tied.HeadBytes != 4*8*100+4*8 || tied.EmbedBytes != 4*8*100 {
		t.Fatalf("tied: %+v, %v", tied, err)
	}

	bad := []struct {
		name    string
		m       *shards.Manifest
		wantMsg string
	}{
		{"nil", nil, "no manifest"},
		{"layers with no weights", testManifest(4, 0, 400, 10, 10), "4 layers hold no weights"},
		{"head of a million layers", testManifest(2, 4, 4<<20, 10, 10), "output head costs 1.049e+06 layers' time (want 0..1024)"},
		{"too many layers", testManifest(MaxModelLayers+1, 4, 4, 1, 1), "1025 layers"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ShapeFromManifest(tt.m)
			if !errors.Is(err, ErrBadShape) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want ErrBadShape containing %q", err, tt.wantMsg)
			}
		})
	}
}
