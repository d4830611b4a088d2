package pipeline

import (
	"math"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// How far honest peers' results may differ, and how far a conviction needs.

// f16Tolerance is the least tolerance between f16 routes cut at other
// layers.
const f16Tolerance = 5e-2

// Over quantized weights honest peers do not compute a layer alike, and
// least so on other CPUs (see verify's tolerance, its bound per layer).
// On the synthetic q8_0 and q4_k models an arm64 route and an amd64 one
// differed by up to 1.3e-2 and 2.6e-2 in the logits (e2e
// TestArm64StageInAmd64Swarm), and a whole q4_k model's logits by up to
// 4.5e-2 over random inputs of the tiny, small and 0.6b shapes; two amd64
// builds (x86-64 and x86-64-v3) put a q8_0 layer up to 2.7e-3 apart; one
// build computes alike. So the least tolerance over quantized weights is
// quantSameArch between peers whose records name one CPU architecture,
// and quantCrossArch (about twice the worst measured) when they name
// several or one names none. It
// bounds two routes' logits, two probes of a range, and what this peer's
// own copy of a range bans above. A peer that claims another architecture
// gets the looser bound, no more; a shade below it passes, and the
// challenges (verify) still bound each layer. The architecture compared
// is the record's arch whole, which names the kernels too ("+repack": the
// repacked Q4 kernels, 4.4e-2 from the plain ones, engine
// TestRepackSameTokens) and stages that batch ("+batch": a session batched
// with three others against itself alone, 2.4e-2 for q8_0 and 3.9e-2 for
// q4_k on the 0.6b shape, engine TestBatchedSameTokens).
const (
	quantSameArch  = 1e-2
	quantCrossArch = 1e-1
)

// tolerance is how far results computed by peers may differ in this
// generation: the configured tolerance, and over quantized weights at
// least quantSameArch, or quantCrossArch when the peers' records name
// other CPU architectures (or none).
func (g *generation) tolerance(peers ...string) float64 {
	tol := g.o.SpotCheck.tolerance()
	if g.ref.Float {
		return tol
	}
	if g.oneArch(peers) {
		return max(tol, quantSameArch)
	}
	return max(tol, quantCrossArch)
}

// banMargin is how far a witness's output must be from the accused's for a
// conviction: a clear miss, ten times the configured tolerance, at least
// 1e-2 and the quantized bound between the two. Over a mixture of experts
// computed on other builds it is ten times that bound: a token whose
// router scores two experts within rounding takes one expert on one build
// and the other on the other, and the range's output or the step's logits
// then differ by a third or more (0.31 to 0.51 measured: engine
// TestRepackSameTokens, TestHonestMixedKernelsNeverConvict with a third
// holder), which convicted honest peers before. Such a disagreement stays a
// mismatch (undecided); challenges still bound each layer.
func (g *generation) banMargin(witness, accused string) float64 {
	m := max(10*g.o.SpotCheck.tolerance(), 1e-2, g.tolerance(witness, accused))
	if !g.ref.Float && g.ref.Experts && !g.oneArch([]string{witness, accused}) {
		m = max(m, 10*quantCrossArch)
	}
	return m
}

// oneArch reports whether every peer's record names the same CPU
// architecture (this peer's own is its build's).
func (g *generation) oneArch(peers []string) bool {
	arch := ""
	for _, p := range peers {
		a := g.o.arch()
		if p != g.o.Host.ID().String() {
			id, err := peer.Decode(p)
			if err != nil {
				return false
			}
			q, ok := g.o.View.Get(id)
			if !ok || q.Cap.Platform.Arch == "" {
				return false
			}
			a = q.Cap.Platform.Arch
		}
		if arch != "" && a != arch {
			return false
		}
		arch = a
	}
	return true
}

// hopPeers lists the peers of routes.
func hopPeers(routes ...[]Hop) []string {
	var out []string
	for _, r := range routes {
		for _, h := range r {
			out = append(out, h.Peer)
		}
	}
	return out
}

// agree reports whether two results agree within tol, relative to the
// largest magnitude (at least 1) of each row of n values (a position's
// hidden state; n 0: one row, the logits), and the largest difference
// found, so relative.
func agree(a, b []float32, n int, tol float64) (bool, float64) {
	if n <= 0 {
		n = max(len(a), 1)
	}
	if len(a) != len(b) || len(a)%n != 0 {
		return false, math.Inf(1)
	}
	worst := 0.0
	for off := 0; off < len(a); off += n {
		scale, diff := 1.0, 0.0
		for i := off; i < off+n; i++ {
			scale = max(scale, math.Abs(float64(a[i])))
			diff = max(diff, math.Abs(float64(a[i])-float64(b[i])))
		}
		worst = max(worst, diff/scale)
	}
	return worst <= tol, worst
}

// routesTolerance is how far two routes' logits may differ.
func (g *generation) routesTolerance(a, b []Hop) float64 {
	tol := g.tolerance(hopPeers(a, b)...)
	if g.req.DType == DTypeF16 && !sameCuts(a, b) {
		tol = max(tol, f16Tolerance)
	}
	return tol
}

// arch is how this peer computes, as its record names it.
func (o *Originator) arch() string {
	if o.Arch != "" {
		return o.Arch
	}
	return engine.ComputeArch()
}
