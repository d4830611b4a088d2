package node

import (
	"fmt"
	"time"

	"github.com/llmswarm/llmswarm/swarm"
)

// ProgressConfig sets how this peer, as an originator, notices a hung peer
// during a pipeline step or an MoA answer (see swarm.Progress and
// docs/pipeline.md, "Hung stages").
type ProgressConfig struct {
	// Floor is the least time without progress before the peers are
	// probed. Default 750ms.
	Floor Duration `json:"floor,omitempty"`
	// Multiplier scales the peer's measured time for the expected work.
	// Default 4.
	Multiplier float64 `json:"multiplier,omitempty"`
	// ProbeTimeout is how long a ping may take before the peer is hung.
	// Default 500ms.
	ProbeTimeout Duration `json:"probe_timeout,omitempty"`
	// MaxStall ends a call with no progress for this long although its
	// peers answer pings. Default 2m.
	MaxStall Duration `json:"max_stall,omitempty"`
}

func (p ProgressConfig) validate() error {
	for name, r := range map[string]struct {
		d      Duration
		lo, hi time.Duration
	}{
		"floor":         {p.Floor, 10 * time.Millisecond, time.Minute},
		"probe_timeout": {p.ProbeTimeout, 10 * time.Millisecond, time.Minute},
		"max_stall":     {p.MaxStall, time.Second, time.Hour},
	} {
		if r.d != 0 && (time.Duration(r.d) < r.lo || time.Duration(r.d) > r.hi) {
			return fmt.Errorf("config: progress.%s %s: want %s..%s", name, time.Duration(r.d), r.lo, r.hi)
		}
	}
	if p.Multiplier < 0 || p.Multiplier > 100 {
		return fmt.Errorf("config: progress.multiplier %g: want 0..100 (0: default 4)", p.Multiplier)
	}
	return nil
}

func (p ProgressConfig) swarm() swarm.Progress {
	return swarm.Progress{Floor: time.Duration(p.Floor), Multiplier: p.Multiplier,
		ProbeTimeout: time.Duration(p.ProbeTimeout), MaxStall: time.Duration(p.MaxStall)}.Defaults()
}
