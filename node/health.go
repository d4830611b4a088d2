package node

import (
	"slices"
	"sync"
)

// health holds the peer's current problems (an unreachable bootstrap peer,
// mDNS unavailable, an identity key others can read), each under a key so
// that it is reported once and cleared when it goes away. The zero value is
// ready; GET /v1/swarm/status shows them as "warnings".
type health struct {
	mu   sync.Mutex
	warn map[string]string
}

// set records the problem under key and reports whether it is new or
// changed, so the caller logs it once rather than on every retry.
func (h *health) set(key, msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.warn == nil {
		h.warn = map[string]string{}
	}
	if h.warn[key] == msg {
		return false
	}
	h.warn[key] = msg
	return true
}

// clear forgets the problem under key and reports whether there was one.
func (h *health) clear(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, had := h.warn[key]
	delete(h.warn, key)
	return had
}

// list returns the problems, sorted; never nil, so JSON shows [].
func (h *health) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.warn))
	for _, m := range h.warn {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Warnings are the peer's current health problems, one sentence each:
// what swarmctl status shows under WARNINGS.
func (n *Node) Warnings() []string { return n.health.list() }
