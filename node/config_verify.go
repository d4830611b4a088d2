package node

import (
	"fmt"
	"math"
	"time"

	"github.com/llmswarm/llmswarm/verify"
)

// TrustConfig sets how this peer checks other peers' claims before they
// get real work (see docs/trust.md, "Challenges"). The zero value is the default:
// challenges on.
type TrustConfig struct {
	// Challenges turns the challenge of a peer's claim before its first
	// pipeline hop or MoA question on or off. Default true. Off, routing
	// still uses measured speeds and bans (a peer may be banned by other
	// checks), and this peer still answers others' challenges.
	Challenges *bool `json:"challenges,omitempty"`
	// CheckLayers is how many single layers a challenge recomputes when
	// this peer does not hold the whole range claimed. Default 2.
	CheckLayers int `json:"check_layers,omitempty"`
	// Tolerance is the largest relative L2 error a layer's output may
	// show. Default by the weights: 1e-3 for float ones; for quantized
	// ones 1e-2 from a peer whose record names this peer's CPU
	// architecture, else 3e-2 (verify/tolerance.go).
	Tolerance float64 `json:"tolerance,omitempty"`
	// Tokens is the number of input positions of a challenge. Default 8.
	Tokens int `json:"tokens,omitempty"`
	// Ban is a peer's first ban for a failed check; each further failure
	// doubles it, up to MaxBan. Defaults 10m and 24h.
	Ban    Duration `json:"ban,omitempty"`
	MaxBan Duration `json:"max_ban,omitempty"`
}

// challenges reports whether claims are challenged.
func (t TrustConfig) challenges() bool { return t.Challenges == nil || *t.Challenges }

func (t TrustConfig) validate() error {
	if t.CheckLayers < 0 || t.CheckLayers > 64 {
		return fmt.Errorf("config: trust.check_layers %d: want 1..64 (0: default 2)", t.CheckLayers)
	}
	if t.Tolerance < 0 || t.Tolerance > 1 || math.IsNaN(t.Tolerance) {
		return fmt.Errorf("config: trust.tolerance %g: want 0..1 (0: by the weights, 1e-3 for float ones, 1e-2 or 3e-2 for quantized)", t.Tolerance)
	}
	if t.Tokens < 0 || t.Tokens > verify.MaxTokens {
		return fmt.Errorf("config: trust.tokens %d: want 1..%d (0: default %d)", t.Tokens, verify.MaxTokens, verify.MaxTokens)
	}
	for name, d := range map[string]Duration{"ban": t.Ban, "max_ban": t.MaxBan} {
		if d != 0 && (time.Duration(d) < time.Second || time.Duration(d) > 30*24*time.Hour) {
			return fmt.Errorf("config: trust.%s %s: want 1s..720h", name, time.Duration(d))
		}
	}
	if t.Ban != 0 && t.MaxBan != 0 && t.MaxBan < t.Ban {
		return fmt.Errorf("config: trust.max_ban %s is shorter than trust.ban %s", time.Duration(t.MaxBan), time.Duration(t.Ban))
	}
	return nil
}
