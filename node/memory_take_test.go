package node

import (
	"errors"
	"math"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// TestMemoryTakeOverflow: needs whose sum or product passes an int64
// (a header's KV cache times the slots) are refused as not fitting, never
// wrapped to a negative need that fits and shrinks what is counted used.
func TestMemoryTakeOverflow(t *testing.T) {
	b := &memBudget{limit: 4 << 30, source: "max_memory"}
	for _, tc := range []struct {
		name string
		mem  engine.Memory
	}{
		{"kv x slots", engine.Memory{Weights: 1 << 20, KVPerSession: 1 << 62}},
		{"weights + kv", engine.Memory{Weights: math.MaxInt64 - 10, KVPerSession: 10}},
		{"negative", engine.Memory{Weights: -1 << 40, KVPerSession: 1}},
	} {
		if got, err := b.take("role x", tc.mem, engine.Options{Slots: 4, Context: 4096}); !errors.Is(err, errNoMemory) {
			t.Errorf("%s: took %d (%v), want it refused", tc.name, got, err)
		}
	}
	if st := b.status(); st.UsedBytes != 0 {
		t.Fatalf("used %d after refusals", st.UsedBytes)
	}
	if _, err := b.take("role y", engine.Memory{Weights: 1 << 30, KVPerSession: 1 << 20}, engine.Options{Slots: 4}); err != nil {
		t.Fatalf("a 1GiB role in 4GiB: %v", err)
	}
	// Without a budget (RAM unknown) nothing is refused but a count that
	// would overflow.
	none := &memBudget{source: "no max_memory"}
	if _, err := none.take("role z", engine.Memory{Weights: 1 << 40}, engine.Options{Slots: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := none.take("role w", engine.Memory{Weights: math.MaxInt64 - 1}, engine.Options{Slots: 1}); !errors.Is(err, errNoMemory) {
		t.Fatalf("an overflowing count without a budget: %v", err)
	}
}
