package swarm

import (
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// update takes a newer record of a peer alive in the table that others
// relayed: what it says (roles, shards, load) is the peer's own, signed,
// but its arrival proves nothing about the peer being there now, so it
// extends no lease. It reports whether the record was taken.
func (v *View) update(c *gossip.Capability, sealed []byte) bool {
	id, err := peer.Decode(c.PeerID)
	if err != nil {
		return false
	}
	v.mu.Lock()
	p, ok := v.peers[id]
	if !ok || !p.Alive || c.Seq <= p.Cap.Seq {
		alive := ok && p.Alive
		v.mu.Unlock()
		return alive
	}
	ch := changed(&p.Cap, c)
	p.Cap, p.sealed = *c, sealed
	snapshot := *p
	v.mu.Unlock()
	if ch {
		v.subs.send(Event{Kind: PeerChanged, Peer: snapshot})
	}
	return true
}

// markDead makes id dead now (it failed its probes). It reports whether
// it was alive.
func (v *View) markDead(id peer.ID, now time.Time) bool {
	v.mu.Lock()
	p, ok := v.peers[id]
	if !ok || p.Self || !p.Alive {
		v.mu.Unlock()
		return false
	}
	p.Alive, p.DeadSince, p.until = false, now, time.Time{}
	snapshot := *p
	v.mu.Unlock()
	v.subs.send(Event{Kind: PeerDead, Peer: snapshot})
	return true
}

// rows returns every peer but this one, unsorted.
func (v *View) rows() []Peer {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]Peer, 0, len(v.peers))
	for _, p := range v.peers {
		if !p.Self {
			out = append(out, *p)
		}
	}
	return out
}

// sample returns the sealed records of up to n live peers other than
// this one and not, picked at random, within maxBytes in all.
func (v *View) sample(n, maxBytes int, not peer.ID) [][]byte {
	if n <= 0 {
		return nil
	}
	v.mu.RLock()
	var all [][]byte
	for _, p := range v.peers {
		if p.Alive && !p.Self && p.ID != not && p.sealed != nil {
			all = append(all, p.sealed)
		}
	}
	v.mu.RUnlock()
	out, _ := pickRecords(all, n, maxBytes)
	return out
}

// pickRecords shuffles recs and takes up to n of them within maxBytes in
// all (one that does not fit is passed over); it returns them and their
// bytes.
func pickRecords(recs [][]byte, n, maxBytes int) (out [][]byte, size int) {
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	for _, b := range recs {
		if len(out) == n {
			break
		}
		if size+len(b) <= maxBytes {
			size += len(b)
			out = append(out, b)
		}
	}
	return out, size
}

// material reports whether cur says something that matters beyond what
// old (the record last published) said, so that it goes out now rather
// than at the next refresh: other addresses, roles, shards, platform,
// version or thermal state; taking work or not; saturated (every slot
// busy) or not; a queue or none; a battery's charging, or its charge by
// a tenth; free memory by an eighth of the total. Load that moves within
// those bounds waits for the refresh.
func material(old, cur *gossip.Capability) bool {
	if changed(&gossip.Capability{Addrs: old.Addrs, Roles: old.Roles, Shards: old.Shards, Platform: platformNoFree(old.Platform), Thermal: old.Thermal},
		&gossip.Capability{Addrs: cur.Addrs, Roles: cur.Roles, Shards: cur.Shards, Platform: platformNoFree(cur.Platform), Thermal: cur.Thermal}) {
		return true
	}
	if old.Version != cur.Version || old.TakesWork() != cur.TakesWork() || saturated(old.Load) != saturated(cur.Load) ||
		(old.Load.Queued > 0) != (cur.Load.Queued > 0) {
		return true
	}
	ob, cb := old.Battery, cur.Battery
	if (ob == nil) != (cb == nil) || ob != nil && (ob.Charging != cb.Charging || ob.Percent/10 != cb.Percent/10) {
		return true
	}
	d := int64(old.Platform.FreeRAM) - int64(cur.Platform.FreeRAM)
	return cur.Platform.RAMBytes > 0 && uint64(max(d, -d)) > cur.Platform.RAMBytes/8
}

func platformNoFree(p gossip.Platform) gossip.Platform {
	p.FreeRAM = 0
	p.GPUs = append([]gossip.GPU(nil), p.GPUs...)
	for i := range p.GPUs {
		p.GPUs[i].FreeVRAM = 0
	}
	return p
}

func saturated(l gossip.Load) bool { return l.Capacity > 0 && l.Active >= l.Capacity }
