package moa

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// Weight ranks a role holder: min(tok/s / 40, 1) x a thermal penalty
// (nominal or fair 1.0, serious 0.5, critical 0.1) x a load factor (a peer
// with free slots 1.0, a full one 0.25, as it will likely answer busy).
func Weight(tokPerSec float64, thermal string, load gossip.Load) float64 {
	w := math.Min(tokPerSec/40, 1)
	if w <= 0 {
		w = 0.01 // unmeasured: usable, last
	}
	switch thermal {
	case gossip.ThermalSerious:
		w *= 0.5
	case gossip.ThermalCritical:
		w *= 0.1
	}
	if load.Capacity > 0 && load.Active >= load.Capacity {
		w *= 0.25
	}
	return w
}

// candidate is a peer that can answer as a role.
type candidate struct {
	peer   swarm.Peer
	role   gossip.Role
	weight float64
	// verified: this peer checked the candidate's claim to its role model
	// itself (always true of this peer's own roles).
	verified bool
}

// unverifiedFactor scales the weight of a role peer whose claim this peer
// has not verified: it is asked only when no verified holder does better.
const unverifiedFactor = 0.1

// candidates lists the live holders of role that take work, weighed by
// weigh, best first. This peer's own roles are listed even while it takes
// no work from others: its own user's question may use them. Ties are broken at random: not by the announced speed (a claim),
// nor by peer ID (which a peer chooses).
func candidates(v *swarm.View, role string, weigh func(*candidate)) []candidate {
	var out []candidate
	for _, h := range v.ByRole(role) {
		if !h.Peer.Self && !h.Peer.Cap.TakesWork() {
			continue // it would answer busy (battery low, or hot)
		}
		c := candidate{peer: h.Peer, role: h.Role}
		weigh(&c)
		out = append(out, c)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	slices.SortStableFunc(out, heavierFirst)
	return out
}

// heavierFirst orders candidates by weight, the heaviest first.
func heavierFirst(a, b candidate) int { return cmp.Compare(b.weight, a.weight) }
