package gossip

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// floodBurst is how many capability records a signer may publish at once
// beyond the flood limit's rate (a peer that starts, loads its models and
// learns its addresses changes its record a few times in a row).
const floodBurst = 10

// rateLimit is a token bucket per signer: burst tokens, one more every
// period. It holds at most max signers; when full it forgets the one
// with the fullest bucket (the quietest), which loses nothing but a
// refill.
type rateLimit struct {
	period time.Duration
	burst  float64
	max    int

	mu      sync.Mutex
	buckets map[peer.ID]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newRateLimit(period time.Duration, burst, max int) *rateLimit {
	return &rateLimit{period: period, burst: float64(burst), max: max, buckets: map[peer.ID]*bucket{}}
}

// allow takes one token of p's bucket at now and reports whether there
// was one. A nil limit allows everything.
func (l *rateLimit) allow(p peer.ID, now time.Time) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[p]
	if !ok {
		if len(l.buckets) >= l.max {
			l.forgetFullestLocked(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[p] = b
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(l.burst, b.tokens+float64(d)/float64(l.period))
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (l *rateLimit) forgetFullestLocked(now time.Time) {
	var victim peer.ID
	best := -1.0
	for p, b := range l.buckets {
		t := min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.period))
		if t > best {
			victim, best = p, t
		}
	}
	delete(l.buckets, victim)
}
