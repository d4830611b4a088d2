package swarm

import (
	"testing"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestMaterialGPU: a record whose GPUs' free memory moved is not sent
// before the refresh; one naming another GPU, or a shard moved to the GPU,
// is (and the record last sent is left as it was).
func TestMaterialGPU(t *testing.T) {
	base := func() *gossip.Capability {
		return &gossip.Capability{Platform: gossip.Platform{OS: "linux", Arch: "amd64+repack+vulkan", RAMBytes: 8 << 30,
			GPUs: []gossip.GPU{{Backend: "Vulkan", Name: "NVIDIA H200", VRAMBytes: 141 << 30, FreeVRAM: 100 << 30}}},
			Shards: []gossip.Shard{{ModelCID: "m", Start: 0, End: 4, Layers: 8, Backend: "CPU"}}}
	}
	old := base()
	cur := base()
	cur.Platform.GPUs[0].FreeVRAM = 20 << 30
	if material(old, cur) {
		t.Fatal("a GPU's free memory moving is material")
	}
	if old.Platform.GPUs[0].FreeVRAM != 100<<30 || cur.Platform.GPUs[0].FreeVRAM != 20<<30 {
		t.Fatal("material changed the records it compared")
	}
	cur = base()
	cur.Platform.GPUs = append(cur.Platform.GPUs, gossip.GPU{Backend: "Vulkan", Name: "another", VRAMBytes: 8 << 30})
	if !material(old, cur) {
		t.Fatal("a second GPU is not material")
	}
	cur = base()
	cur.Shards[0].Backend = "Vulkan 4/4"
	if !material(old, cur) {
		t.Fatal("a shard moved to the GPU is not material")
	}
}
