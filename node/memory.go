package node

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
)

// memBudget is what this peer may spend on serving: the weights and KV
// caches of the roles and shards it loads (config max_memory). Models are
// checked against it from their file headers before they are loaded, so
// one that does not fit is refused, not loaded into a device that then
// runs out of memory.
type memBudget struct {
	mu     sync.Mutex
	limit  int64  // 0: none (the device's RAM is unknown and none was set)
	source string // where limit comes from, for messages
	used   int64
	held   map[*engine.Model]int64 // what each unloadable model reserved
}

// init sets the budget from the config, or to half the device's RAM.
func (b *memBudget) init(cfg ByteSize) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used = 0
	switch total, _ := memInfo(); {
	case cfg > 0:
		b.limit, b.source = int64(cfg), "max_memory"
	case total > 0:
		b.limit, b.source = int64(total/2), fmt.Sprintf("max_memory's default, half of this device's %s of RAM", ByteSize(total))
	default:
		b.limit, b.source = 0, "no max_memory set and this device's RAM unknown"
	}
}

// errNoMemory: a model does not fit in the memory budget.
var errNoMemory = errors.New("does not fit in this peer's memory budget")

// reserve counts what loading path with opts takes against the budget, or
// says clearly why it does not fit. what names the role or shard.
func (b *memBudget) reserve(what, path string, opts engine.Options) (int64, error) {
	mem, eff, err := engine.Estimate(path, opts)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return b.take(what, mem, eff)
}

// take counts mem's weights and eff.Slots KV caches against the budget.
func (b *memBudget) take(what string, mem engine.Memory, eff engine.Options) (int64, error) {
	slots := int64(max(eff.Slots, 1))
	// More than any budget where the sum would not fit an int64.
	kv, need := int64(math.MaxInt64), int64(math.MaxInt64)
	if mem.Weights >= 0 && mem.KVPerSession >= 0 && mem.KVPerSession <= (math.MaxInt64-mem.Weights)/slots {
		kv = mem.KVPerSession * slots
		need = mem.Weights + kv
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && need > b.limit-b.used {
		return 0, fmt.Errorf("%w: %s needs %s (weights %s, KV cache %s for %d slots of %d tokens), and %s of %s are left (%s); "+
			"set max_memory, or fewer engine.slots or a smaller engine.context",
			errNoMemory, what, ByteSize(need), ByteSize(mem.Weights), ByteSize(kv), eff.Slots, eff.Context,
			ByteSize(b.limit-b.used), ByteSize(b.limit), b.source)
	}
	if need > math.MaxInt64-b.used {
		return 0, fmt.Errorf("%w: %s needs %s, more than this peer can count (%s)", errNoMemory, what, ByteSize(need), b.source)
	}
	b.used += need
	return need, nil
}

// release gives back what a model that was not loaded after all reserved.
func (b *memBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

func (b *memBudget) status() client.MemoryStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return client.MemoryStatus{MaxBytes: b.limit, UsedBytes: b.used, Source: b.source}
}

// hold notes what model m reserved, for releaseModel once it is unloaded.
func (b *memBudget) hold(m *engine.Model, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[*engine.Model]int64{}
	}
	b.held[m] = n
}

// releaseModel gives back what m reserved (see hold).
func (b *memBudget) releaseModel(m *engine.Model) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= b.held[m]
	delete(b.held, m)
}
