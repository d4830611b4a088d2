package swarm

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Claim is what a peer says it can compute: layers [Start,End) of the
// model with CID Model (a whole role model is [0,layers)).
type Claim struct {
	Model string `json:"model"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

func (c Claim) String() string { return fmt.Sprintf("%s[%d,%d)", c.Model, c.Start, c.End) }

// Covers reports whether c includes the layers of o.
func (c Claim) Covers(o Claim) bool {
	return c.Model == o.Model && c.Start <= o.Start && o.End <= c.End
}

// Trust is this peer's own record of what it has seen other peers do: the
// claims it checked and found true, the checks they failed (each one bans
// the peer for a while, doubling with every failure), and the speeds it
// measured itself. Nothing in it comes from another peer's word: only the
// originator's own checks and timings are recorded, so a liar cannot get
// an honest peer banned by accusing it.
//
// It is safe for concurrent use. The zero value is not usable: use NewTrust.
type Trust struct {
	// BanFor is the first ban's length (default 10 min); each further
	// failure doubles it, up to MaxBan (default 24 h).
	BanFor, MaxBan time.Duration

	now func() time.Time

	mu    sync.Mutex
	peers map[peer.ID]*trustRecord
	subs  []func(peer.ID)
}

// trustRecord is what Trust knows of one peer.
type trustRecord struct {
	Verified  []Claim            `json:"verified,omitempty"`
	Passed    int                `json:"passed,omitempty"`
	Checked   int                `json:"checked,omitempty"`
	Failures  int                `json:"failures,omitempty"`
	BanUntil  time.Time          `json:"ban_until,omitzero"`
	LastFault string             `json:"last_fault,omitempty"`
	Speeds    map[string]float64 `json:"speeds,omitempty"`
	Seen      time.Time          `json:"seen"`
}

// maxTrusted bounds the records kept: beyond it the least recently used
// record of a peer that is not banned is dropped (a ban is kept longest).
const maxTrusted = 8192

// speedAlpha is the weight of a new measurement in the running average.
const speedAlpha = 0.3

// NewTrust returns an empty ledger.
func NewTrust() *Trust {
	return &Trust{peers: map[peer.ID]*trustRecord{}, now: time.Now}
}

// SetClockForTest replaces the ledger's clock.
func (t *Trust) SetClockForTest(now func() time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = now
}

func (t *Trust) banFor(failures int) time.Duration {
	d, most := t.BanFor, t.MaxBan
	if d <= 0 {
		d = 10 * time.Minute
	}
	if most <= 0 {
		most = 24 * time.Hour
	}
	for i := 1; i < failures && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// rec returns id's record, creating it; t.mu must be held.
func (t *Trust) rec(id peer.ID) *trustRecord {
	r, ok := t.peers[id]
	if !ok {
		if len(t.peers) >= maxTrusted {
			t.evictLocked()
		}
		r = &trustRecord{}
		t.peers[id] = r
	}
	r.Seen = t.now()
	return r
}

func (t *Trust) evictLocked() {
	var victim peer.ID
	var oldest time.Time
	now := t.now()
	for id, r := range t.peers {
		if r.BanUntil.After(now) {
			continue
		}
		if victim == "" || r.Seen.Before(oldest) {
			victim, oldest = id, r.Seen
		}
	}
	if victim == "" { // all banned: drop the ban that ends first
		for id, r := range t.peers {
			if victim == "" || r.BanUntil.Before(oldest) {
				victim, oldest = id, r.BanUntil
			}
		}
	}
	delete(t.peers, victim)
}

// Pass records that id computed claim c correctly in a check this peer
// made itself.
func (t *Trust) Pass(id peer.ID, c Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rec(id)
	r.Passed++
	for _, v := range r.Verified {
		if v.Covers(c) {
			return
		}
	}
	r.Verified = slices.DeleteFunc(r.Verified, func(v Claim) bool { return c.Covers(v) })
	if len(r.Verified) < 64 {
		r.Verified = append(r.Verified, c)
	}
}

// Fail records that id failed a check this peer made itself (a wrong
// result, malformed output, a claim it could not back), bans it for the
// current ban length and forgets what it had verified. It returns how
// long the ban lasts. fault says what was seen, for logs and status.
func (t *Trust) Fail(id peer.ID, fault string) time.Duration {
	t.mu.Lock()
	r := t.rec(id)
	r.Failures++
	d := t.banFor(r.Failures)
	r.BanUntil = t.now().Add(d)
	r.LastFault = fault
	r.Verified = nil
	r.Checked = 0 // back on probation when its ban ends
	subs := slices.Clone(t.subs)
	t.mu.Unlock()
	for _, f := range subs {
		f(id)
	}
	return d
}

// Withdraw records that id said it does not hold claim c now (a
// restart, a shard still loading or dropped): what was verified of c's
// layers must be proven again, and the peer is back on probation, since
// what it holds next may not be what it held. It is not a failure: no
// ban.
func (t *Trust) Withdraw(id peer.ID, c Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.peers[id]
	if !ok {
		return
	}
	n := len(r.Verified)
	r.Verified = slices.DeleteFunc(r.Verified, func(v Claim) bool {
		return v.Model == c.Model && v.Start < c.End && c.Start < v.End
	})
	if len(r.Verified) != n {
		r.Checked = 0
	}
}

// OnBan calls f (which must not block) whenever a peer is banned.
func (t *Trust) OnBan(f func(peer.ID)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs = append(t.subs, f)
}

// Banned reports whether id is banned now, and why.
func (t *Trust) Banned(id peer.ID) (bool, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.peers[id]
	if !ok || !r.BanUntil.After(t.now()) {
		return false, ""
	}
	return true, r.LastFault
}

// Verified reports whether id has passed a check covering c since its
// last failure.
func (t *Trust) Verified(id peer.ID, c Claim) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.peers[id]
	if !ok || r.BanUntil.After(t.now()) {
		return false
	}
	for _, v := range r.Verified {
		if v.Covers(c) {
			return true
		}
	}
	return false
}

// Proven reports whether id has passed any check and is not banned: a peer
// that did real work this peer verified.
func (t *Trust) Proven(id peer.ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.peers[id]
	return ok && r.Passed > 0 && !r.BanUntil.After(t.now())
}

// Agreed records that a real answer through id was checked on a second
// route and agreed: a newly proven peer's first answers are all checked
// until it has served enough of them (Checked).
func (t *Trust) Agreed(id peer.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rec(id).Checked++
}

// Checked is how many checked real answers through id agreed since its
// last failure.
func (t *Trust) Checked(id peer.ID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.peers[id]; ok {
		return r.Checked
	}
	return 0
}

// Measure folds a speed this peer measured itself (key names what was
// measured, e.g. "ms_per_layer:<model>" or "tok_s:<role>") into id's
// running average.
func (t *Trust) Measure(id peer.ID, key string, v float64) {
	if v <= 0 || v != v || v > 1e12 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rec(id)
	if r.Speeds == nil {
		r.Speeds = map[string]float64{}
	}
	if old, ok := r.Speeds[key]; ok {
		v = old + speedAlpha*(v-old)
	} else if len(r.Speeds) >= 64 {
		return
	}
	r.Speeds[key] = v
}

// Speed returns the running average of what this peer measured of id
// under key.
func (t *Trust) Speed(id peer.ID, key string) (float64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.peers[id]
	if !ok {
		return 0, false
	}
	v, ok := r.Speeds[key]
	return v, ok
}

// TrustEntry is one peer's row in a snapshot.
type TrustEntry struct {
	Peer      string             `json:"peer"`
	Verified  []Claim            `json:"verified,omitempty"`
	Passed    int                `json:"passed"`
	Checked   int                `json:"checked,omitempty"` // checked real answers that agreed
	Failures  int                `json:"failures"`
	BanUntil  time.Time          `json:"ban_until,omitzero"`
	LastFault string             `json:"last_fault,omitempty"`
	Speeds    map[string]float64 `json:"speeds,omitempty"`
	Seen      time.Time          `json:"seen"`
}

// Snapshot returns every record, ordered by peer ID.
func (t *Trust) Snapshot() []TrustEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]TrustEntry, 0, len(t.peers))
	for id, r := range t.peers {
		out = append(out, TrustEntry{Peer: id.String(), Verified: slices.Clone(r.Verified), Passed: r.Passed,
			Checked: r.Checked, Failures: r.Failures, BanUntil: r.BanUntil, LastFault: r.LastFault, Speeds: maps.Clone(r.Speeds), Seen: r.Seen})
	}
	slices.SortFunc(out, func(a, b TrustEntry) int {
		if a.Peer < b.Peer {
			return -1
		}
		if a.Peer > b.Peer {
			return 1
		}
		return 0
	})
	return out
}

// MarshalJSON saves the ledger (bans and failure counts survive a
// restart, so a liar cannot wash its record by restarting the victim).
func (t *Trust) MarshalJSON() ([]byte, error) { return json.Marshal(t.Snapshot()) }

// Restore loads a saved ledger, keeping only well-formed entries.
func (t *Trust) Restore(b []byte) error {
	var es []TrustEntry
	if err := json.Unmarshal(b, &es); err != nil {
		return fmt.Errorf("swarm: trust ledger: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range es {
		id, err := peer.Decode(e.Peer)
		if err != nil || e.Passed < 0 || e.Checked < 0 || e.Failures < 0 || len(t.peers) >= maxTrusted {
			continue
		}
		if len(e.Verified) > 64 {
			e.Verified = e.Verified[:64]
		}
		if len(e.Speeds) > 64 {
			e.Speeds = nil
		}
		t.peers[id] = &trustRecord{Verified: e.Verified, Passed: e.Passed, Checked: e.Checked, Failures: e.Failures, BanUntil: e.BanUntil,
			LastFault: e.LastFault, Speeds: e.Speeds, Seen: e.Seen}
	}
	return nil
}
