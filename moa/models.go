package moa

import "github.com/llmswarm/llmswarm/internal/engine"

// ModelOf returns the loaded role model whose CID is cid (nil: none), for
// answering challenges of this peer's claim to it.
func (s *Server) ModelOf(cid string) *engine.Model {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	for _, rm := range s.roles {
		if rm.CID == cid {
			return rm.Model
		}
	}
	return nil
}
