package verify

import (
	"math"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

// Two honest peers on other CPUs do not compute a layer bit for bit alike,
// and with quantized weights they differ by more than a small lie. One
// layer from the same input, arm64 (ggml's NEON build with the dot
// product, under qemu as a Cortex-A76) against amd64 (x86-64-v3), relative
// L2 error, on 10 to 20 random inputs of the small synthetic models and
// the 0.6b shape alike (2026-11-23, e2e TestArm64StageInAmd64Swarm):
//
//	f32 weights  1.0e-4 to 2.2e-4
//	q8_0         3e-3 to 6e-3, the output layer up to 1.1e-2
//	q4_k         5.5e-3 to 9.5e-3, the output layer up to 1.5e-2
//
// ggml on arm64 multiplies the f16 KV cache by the f32 queries and
// attention weights as they are (llamafile's NEON sgemm), where amd64
// rounds them to f16 first: 1e-4 apart after attention. Quantized weights
// then quantize their input to 8 bits, and that 1e-4 moves a share of the
// values across a rounding step of 1/127 of their block's largest value.
// Even two amd64 builds (x86-64 against x86-64-v3) put one q8_0 layer
// 2.7e-3 apart that way. So a checker holding float weights keeps the
// tight bound, and one holding quantized weights allows twice the worst
// honest difference measured: a peer may shade a quantized layer's output
// by up to that much unseen (a wrong weight, a skipped layer or random
// numbers are off by 0.3 and more). A peer whose record names this peer's
// own architecture gets quantSameArch, which covers other builds for it
// (2.7e-3 measured) with room; claiming another architecture buys a liar
// the looser bound, no more.
const (
	floatTolerance = 1e-3
	quantSameArch  = 1e-2
	quantTolerance = 3e-2
)

// tolerance is the bound for a check of id against the reference m:
// Tolerance when set, else by the types of m's tensors (read from its
// file once per file, not from the header's file type, which a file may
// mislabel; an unreadable file counts as quantized, so an honest peer is
// not banned for this peer's doubt) and, for quantized ones, whether
// id's record names this peer's architecture.
func (c *Checker) tolerance(m *engine.Model, id peer.ID) float64 {
	if c.Tolerance > 0 && !math.IsNaN(c.Tolerance) {
		return c.Tolerance
	}
	path := m.Info().Path
	c.mu.Lock()
	quant, ok := c.quants[path]
	c.mu.Unlock()
	if !ok {
		g, err := shards.ReadGGUFFile(path)
		quant = err != nil || g.Quantized()
		c.mu.Lock()
		if c.quants == nil || len(c.quants) >= maxRemembered {
			c.quants = map[string]bool{}
		}
		c.quants[path] = quant
		c.mu.Unlock()
	}
	if !quant {
		return floatTolerance
	}
	if c.Arch != nil && c.Arch(id) == engine.ComputeArch() {
		return quantSameArch
	}
	return quantTolerance
}
