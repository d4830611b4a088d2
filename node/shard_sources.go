package node

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/shards"
)

// The peers this peer fetches shard files from (slices, headers) are
// input: any peer can announce a model in the DHT. A source whose file
// fails its check (its CID, the model's manifest) is logged, tried after
// every clean source from then on, and on its second bad file banned in
// the trust ledger like a peer caught lying in a challenge. What one
// source can make this peer download per attempt is bounded by the
// manifest (shards.Fetch), so a source costs at most sourceStrikes
// files' worth of poison before it is cut off. Among clean sources the
// one this peer has taken the fewest bytes from goes first, so repeated
// fetches spread over the holders.

// sourceStrikes is how many bad files a source may send before it is banned.
const sourceStrikes = 2

// maxSourceRecords bounds the record: beyond it the oldest entry goes.
const maxSourceRecords = 4096

// shardSources is this peer's record of what its shard sources sent.
type shardSources struct {
	mu   sync.Mutex
	recs map[peer.ID]*sourceRecord
}

type sourceRecord struct {
	faults int       // files that failed their check
	wasted int64     // bytes of those files
	taken  int64     // bytes of files that passed
	last   time.Time // of the last entry
}

// sourceStat is one source's row.
type sourceStat struct {
	Faults      int
	PoisonBytes int64
	GoodBytes   int64
}

func (s *shardSources) rec(id peer.ID) *sourceRecord {
	if s.recs == nil {
		s.recs = map[peer.ID]*sourceRecord{}
	}
	r, ok := s.recs[id]
	if !ok {
		if len(s.recs) >= maxSourceRecords {
			var victim peer.ID
			var oldest time.Time
			for id, r := range s.recs {
				if victim == "" || r.last.Before(oldest) {
					victim, oldest = id, r.last
				}
			}
			delete(s.recs, victim)
		}
		r = &sourceRecord{}
		s.recs[id] = r
	}
	r.last = time.Now()
	return r
}

// order sorts ids (stably, keeping the caller's preference among equals):
// sources that never sent a bad file first, those that did last, fewest
// faults first; among clean ones, the least used first.
func (s *shardSources) order(ids []peer.ID) []peer.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := func(id peer.ID) (int, int64) {
		if r, ok := s.recs[id]; ok {
			return r.faults, r.taken
		}
		return 0, 0
	}
	out := slices.Clone(ids)
	slices.SortStableFunc(out, func(a, b peer.ID) int {
		fa, ta := key(a)
		fb, tb := key(b)
		if c := cmp.Compare(fa, fb); c != 0 || fa > 0 {
			return c
		}
		return cmp.Compare(ta, tb)
	})
	return out
}

// good records bytes a source sent that passed their check.
func (s *shardSources) good(id peer.ID, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec(id).taken += bytes
}

// bad records a file from id that failed its check and returns the
// source's record.
func (s *shardSources) bad(id peer.ID, bytes int64) sourceStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec(id)
	r.faults++
	r.wasted += bytes
	return sourceStat{Faults: r.faults, PoisonBytes: r.wasted, GoodBytes: r.taken}
}

func (s *shardSources) stat(id peer.ID) sourceStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.recs[id]; ok {
		return sourceStat{Faults: r.faults, PoisonBytes: r.wasted, GoodBytes: r.taken}
	}
	return sourceStat{}
}

// usableSource reports whether id may be fetched from: not this peer and
// not banned.
func (n *Node) usableSource(id peer.ID) bool {
	if id == n.host.ID() {
		return false
	}
	banned, _ := n.trust.Banned(id)
	return !banned
}

// sourceFailed judges a failed fetch of what (a slice, a header) from id:
// when the error says the file failed its check, the source is logged and
// recorded, and banned on its sourceStrikes-th such file. bytes is how
// much of the file arrived.
func (n *Node) sourceFailed(id peer.ID, model, what string, bytes int64, err error) {
	if !shards.BadSource(err) {
		return
	}
	st := n.pipe.sources.bad(id, bytes)
	n.log.Warn("shard source sent a file that fails its check", "peer", id, "model", model, "file", what,
		"bytes", bytes, "faults", st.Faults, "poison_bytes", st.PoisonBytes, "err", err)
	if st.Faults >= sourceStrikes {
		fault := fmt.Sprintf("sent %d shard files that fail the model's manifest or CID (last: %s of %s)", st.Faults, what, model)
		d := n.trust.Fail(id, fault)
		n.log.Warn("shard source banned", "peer", id, "model", model, "faults", st.Faults, "poison_bytes", st.PoisonBytes, "for", d)
	}
}
