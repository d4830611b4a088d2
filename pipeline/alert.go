package pipeline

import (
	"sync"
	"time"
)

// A disagreement between two routes puts the layers where they parted on
// alert: every generation whose route runs any of them is checked for
// alertFor, whoever the peers are, so a liar that was not convicted (two
// routes disagreed and nothing decided), or a second one on the same
// layers, meets a check on every answer instead of one in ten. An alert
// bans no one.

// alertFor is how long a disagreement keeps its layers on alert.
const alertFor = 10 * time.Minute

// maxAlerts bounds the ranges on alert (the oldest is dropped first).
const maxAlerts = 256

type alertRange struct {
	model  string
	lo, hi int
	until  time.Time
}

// alerts is the layer ranges on alert; usable at its zero value.
type alerts struct {
	mu     sync.Mutex
	ranges []alertRange
}

// raise puts layers [lo,hi) of model on alert from now.
func (a *alerts) raise(model string, lo, hi int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	kept := a.ranges[:0]
	for _, r := range a.ranges {
		if r.until.After(now) && (r.model != model || r.lo != lo || r.hi != hi) {
			kept = append(kept, r)
		}
	}
	if len(kept) >= maxAlerts {
		kept = kept[1:]
	}
	a.ranges = append(kept, alertRange{model: model, lo: lo, hi: hi, until: now.Add(alertFor)})
}

// on reports whether a hop of hops runs layers of model on alert.
func (a *alerts) on(model string, hops []Hop) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for _, r := range a.ranges {
		if r.model != model || !r.until.After(now) {
			continue
		}
		for _, h := range hops {
			if h.Start < r.hi && r.lo < h.End {
				return true
			}
		}
	}
	return false
}
