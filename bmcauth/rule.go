package bmcauth

import (
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/gossip"
)

// Source is the last accepted table of one BMC peer.
type Source struct {
	Record *gossip.BMCTable
	Table  *bmc.Table // Record's dump, parsed
	At     time.Time  // received
	Stale  uint64     // older tables ignored since this BMC was first heard
}

// Fresh reports whether the table is still in force at now.
func (src Source) Fresh(now time.Time) bool { return now.Sub(src.At) <= Freshness }

// Snapshot is the service's state at one moment, copied out.
type Snapshot struct {
	// Authority is the BMC whose table is in force, "" when none is.
	Authority peer.ID
	// Table is the authority's table, nil when none is in force.
	Table *Source
	// Sources are the last tables of the allowed BMCs heard from.
	Sources map[peer.ID]Source
	// Allowed are the allowed BMC peers, in peer ID order.
	Allowed []peer.ID
	// Ignored are the publishers outside Allowed, when last seen.
	Ignored map[peer.ID]time.Time
	// Bridge is this peer's bridge, nil unless it is one.
	Bridge *BridgeStatus
}

// Dead reports whether the table in force declares id dead. It is the
// routing hook: with no table in force nobody is dead.
func (s *Service) Dead(id peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, src := s.authorityLocked(time.Now())
	return src != nil && src.Table.Dead(bmc.HandleFor([]byte(id)))
}

// Snapshot copies out the state at now.
func (s *Service) Snapshot(now time.Time) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Sources: map[peer.ID]Source{}, Ignored: map[peer.ID]time.Time{}}
	id, src := s.authorityLocked(now)
	if src != nil {
		cp := *src
		snap.Authority, snap.Table = id, &cp
	}
	for id, src := range s.sources {
		snap.Sources[id] = *src
	}
	for id := range s.allowed {
		snap.Allowed = append(snap.Allowed, id)
	}
	sort.Slice(snap.Allowed, func(i, j int) bool { return snap.Allowed[i].String() < snap.Allowed[j].String() })
	for id, at := range s.ignored {
		snap.Ignored[id] = at
	}
	if s.bridge != nil {
		st := s.bridge.status()
		snap.Bridge = &st
	}
	return snap
}

// accept keeps rec if it comes from an allowed BMC and is newer (boot id,
// seq, uptime) than the last table accepted from that BMC.
func (s *Service) accept(rec *gossip.BMCTable, now time.Time) bool {
	from, err := peer.Decode(rec.PeerID)
	tab := rec.Table()
	if err != nil || tab == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.allowed[from] {
		if _, seen := s.ignored[from]; !seen {
			s.log.Warn("bmc: ignoring tables of a peer not in bmc_peers", "peer", from)
			if len(s.ignored) >= maxIgnored {
				s.evictIgnoredLocked()
			}
		}
		s.ignored[from] = now
		return false
	}
	prev := s.sources[from]
	if prev != nil && !tab.Newer(prev.Table) {
		prev.Stale++
		s.log.Debug("bmc: stale or replayed table ignored", "peer", from, "boot", tab.Boot, "seq", tab.Seq,
			"last_boot", prev.Table.Boot, "last_seq", prev.Table.Seq)
		return false
	}
	var stale uint64
	if prev != nil {
		stale = prev.Stale
	}
	_, prevAuth := s.authorityLocked(now)
	s.sources[from] = &Source{Record: rec, Table: tab, At: now, Stale: stale}
	s.noteAuthorityLocked(now, prevAuth)
	return true
}

// evictIgnoredLocked forgets the ignored publisher seen longest ago.
func (s *Service) evictIgnoredLocked() {
	var victim peer.ID
	var oldest time.Time
	for id, at := range s.ignored {
		if victim == "" || at.Before(oldest) {
			victim, oldest = id, at
		}
	}
	delete(s.ignored, victim)
}

// authorityLocked applies the authority rule at now.
func (s *Service) authorityLocked(now time.Time) (peer.ID, *Source) {
	var best peer.ID
	var src *Source
	for id, sc := range s.sources {
		if !sc.Fresh(now) {
			continue
		}
		if best == "" || id.String() < best.String() {
			best, src = id, sc
		}
	}
	return best, src
}

// noteAuthorityLocked logs authority changes and, for the same authority,
// the peers its new table declares dead (prev is the authority's table
// before the update, or nil).
func (s *Service) noteAuthorityLocked(now time.Time, prev *Source) {
	id, cur := s.authorityLocked(now)
	if id != s.authority {
		switch {
		case id == "":
			s.log.Warn("bmc: no table in force: every BMC silent", "last", s.authority, "silent_for", Freshness)
		case s.authority == "":
			s.log.Info("bmc: authority", "peer", id, "boot", cur.Table.Boot, "seq", cur.Table.Seq)
		default:
			s.log.Warn("bmc: authority changed", "peer", id, "previous", s.authority)
		}
		s.authority = id
	}
	if cur == nil || prev == nil || prev == cur {
		return
	}
	for _, nd := range cur.Table.Nodes {
		if !nd.Live && !prev.Table.Dead(nd.Handle) {
			s.log.Info("bmc: board declares node dead", "node", nd.Handle, "peer", cur.Record.Nodes[nd.Handle.String()],
				"silent_for", nd.Age.Round(time.Millisecond), "bmc", id)
		}
	}
}
