package moa

import (
	"fmt"
	"slices"
	"strings"

	"github.com/llmswarm/llmswarm/gossip"
)

// idleHolders names the live holders of roles that candidates leave out
// because their records say they take no new work (a battery running low,
// a device running hot), with why, as "; X holds reasoner but takes no new
// work: battery 10%, not charging": what ErrNoAgents adds, so the user
// learns the role is there, paused. "" when there are none.
func (o *Originator) idleHolders(roles ...string) string {
	var out []string
	for _, role := range roles {
		for _, h := range o.View.ByRole(role) {
			// The opposite of candidates' own condition: holders that take no
			// work, but otherwise routable (a banned or BMC-dead holder is not
			// "paused", it is gone).
			if h.Peer.Self || h.Peer.Cap.TakesWork() || !o.View.Routable(h.Peer.ID) {
				continue
			}
			note := fmt.Sprintf("%s holds %s but takes no new work", shortPeer(h.Peer.ID.String()), role)
			if why := idleWhy(&h.Peer.Cap); why != "" {
				note += ": " + why
			}
			if !slices.Contains(out, note) {
				out = append(out, note)
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, "; ")
}

// idleWhy is what a record that takes no work says of its power state.
func idleWhy(c *gossip.Capability) string {
	var why []string
	if b := c.Battery; b != nil && !b.Charging {
		why = append(why, fmt.Sprintf("battery %d%%, not charging", b.Percent))
	}
	if t := c.Thermal; t != "" && t != gossip.ThermalNominal {
		why = append(why, "thermal "+t)
	}
	return strings.Join(why, ", ")
}
