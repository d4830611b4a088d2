package answer

import "slices"

// Strategies are the modes of a query that pick how the swarm answers: the
// API's mode field, swarmctl's --mode and chat's /mode take these or a
// role name.
var Strategies = []string{"auto", "moa", "speed", "pipeline"}

// ModeComplete is the mode of a raw completion: the query is text for a
// model to continue, with no chat template, history or role prompt; a
// pipeline model or one role's model (the writer unless the query names
// another) answers it.
const ModeComplete = "complete"

// Roles are the mixture's roles, in the order they are shown (moa gives
// each its voice); a query whose mode names one asks that role alone.
var Roles = []string{"reasoner", "writer", "concise", "critic", "factchecker", "drafter", "spotter", "aggregator"}

// IsMode reports whether m is a mode a query may ask in: a strategy or a
// role ("" is auto), or ModeComplete.
func IsMode(m string) bool {
	return m == "" || m == ModeComplete || slices.Contains(Strategies, m) || slices.Contains(Roles, m)
}
