package swarm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/wire"
)

// RecordsProtocol is the record exchange: a peer sends another its own
// current signed capability record and asks for the other's and,
// optionally, a sample of the records it holds of others. Each side's own
// record came over its own stream (evidence that it is there); the sample
// is only leads, each probed before its peer counts as alive. Newcomers learn the swarm this way at
// once instead of waiting for records to be published. Version 1.1.0
// adds the answer's held (mutual.go).
const RecordsProtocol = protocol.ID("/swarm/records/1.1.0")

// RecordsProtocolV1 is the record exchange before held: a peer answers it
// too (held left out, as a 1.0.0 asker refuses a field it does not know),
// and asks it of a peer that speaks no later version.
const RecordsProtocolV1 = protocol.ID("/swarm/records/1.0.0")

// Limits of the record exchange.
const (
	MaxSample        = 64               // records of others one answer carries
	maxSampleBytes   = 256 << 10        // their sealed bytes in all
	maxRequestBytes  = 96 << 10         // a request frame (the asker's record, base64)
	maxAnswerBytes   = 1 << 20          // an answer frame (base64 inflates the records)
	exchangeTimeout  = 10 * time.Second // one exchange, either side
	serveGap         = 2 * time.Second  // an asker is answered at most this often
	fetchGap         = 10 * time.Second // a peer is asked at most this often
	maxServing       = 64               // answers in progress at once
	maxFetching      = 16               // questions in progress at once
	sampleBelowPeers = 8                // a peer with fewer live peers asks for a sample
	connectTries     = 6                // asks of a newly connected peer before giving up
)

// ErrRecords is the record exchange's error: a malformed request or
// answer, or a refusal.
var ErrRecords = errors.New("swarm: record exchange")

var recordFrames = &wire.Codec{Err: ErrRecords}

type recordsRequest struct {
	Sample int    `json:"sample"`         // 0..MaxSample
	Self   []byte `json:"self,omitempty"` // the asker's sealed record: it tells the answerer of itself
	// Have, when set, is the sequence number of the answerer's record
	// that the asker holds: the answer carries the answerer's record only
	// when its own is newer (a check, as an idle peer's probe is).
	Have uint64 `json:"have,omitempty"`
}

type recordsAnswer struct {
	Self   []byte   `json:"self,omitempty"`   // the answerer's sealed record
	Sample [][]byte `json:"sample,omitempty"` // sealed records of others: leads
	Error  string   `json:"error,omitempty"`  // why the request was refused
	// Held says the answerer's table holds the asker alive (mutual.go).
	Held bool `json:"held,omitempty"`
}

// exchange serves and asks the record exchange.
type exchange struct {
	s *Service

	mu      sync.Mutex
	served  map[peer.ID]time.Time // when each asker was last answered
	asked   map[peer.ID]time.Time // when each peer was last asked
	serving int
	fetch   chan struct{} // a slot per question in progress
	// The questions in progress by peer: one at a time, as the answerer
	// refuses a second asked within serveGap (a Fetch's dial sets off
	// connected's question of the same peer).
	inflight map[peer.ID]*question
	holders  map[peer.ID]time.Time // askers by when they last asked (push.go)
	// newcomers are the askers for a sample, oldest first (newcomers.go).
	newcomers []newcomer
}

// question is a question of the record exchange in progress; a second
// asker of the same peer waits for it and takes its result.
type question struct {
	done chan struct{}
	c    *gossip.Capability
	err  error
}

func newExchange(s *Service) *exchange {
	return &exchange{s: s, served: map[peer.ID]time.Time{}, asked: map[peer.ID]time.Time{},
		fetch: make(chan struct{}, maxFetching), inflight: map[peer.ID]*question{}, holders: map[peer.ID]time.Time{}}
}

// joinLocked waits, with e.mu held on entry and released, for q and
// returns its result.
func (e *exchange) joinLocked(ctx context.Context, q *question) (*gossip.Capability, error) {
	e.mu.Unlock()
	select {
	case <-q.done:
		return q.c, q.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serve answers one request.
func (e *exchange) serve(st network.Stream) {
	defer st.Close()
	from := st.Conn().RemotePeer()
	st.SetDeadline(time.Now().Add(exchangeTimeout))
	if !e.admit(from, time.Now()) {
		recordFrames.WriteJSON(st, 0, recordsAnswer{Error: fmt.Sprintf("asked again within %s, or too many askers", serveGap)}, maxAnswerBytes)
		return
	}
	defer func() {
		e.mu.Lock()
		e.serving--
		e.mu.Unlock()
	}()
	e.heldBy(from, time.Now())
	var req recordsRequest
	_, body, err := recordFrames.Read(st, maxRequestBytes, nil)
	if err == nil {
		err = recordFrames.DecodeJSON(body, &req)
	}
	if err == nil && (req.Sample < 0 || req.Sample > MaxSample) {
		err = fmt.Errorf("%w: sample %d out of 0..%d", ErrRecords, req.Sample, MaxSample)
	}
	if err == nil && req.Self != nil {
		err = e.takeAsker(from, req.Self)
	}
	if err != nil {
		e.s.log.Debug("bad records request", "peer", from, "err", err)
		recordFrames.WriteJSON(st, 0, recordsAnswer{Error: err.Error()}, maxAnswerBytes)
		return
	}
	now := time.Now()
	ans := recordsAnswer{Sample: e.sampleFor(req.Sample, from, now)}
	if st.Protocol() != RecordsProtocolV1 {
		ans.Held = e.s.view.Alive(from)
	}
	if req.Sample > 0 && req.Self != nil {
		e.noteNewcomer(from, req.Self, remoteAddr(e.s.host, from), now)
	}
	if req.Have == 0 || e.s.selfSeq() > req.Have {
		if ans.Self, err = e.s.sealedSelf(); err != nil {
			recordFrames.WriteJSON(st, 0, recordsAnswer{Error: "no record to give: " + err.Error()}, maxAnswerBytes)
			return
		}
	}
	if err := recordFrames.WriteJSON(st, 0, ans, maxAnswerBytes); err != nil {
		e.s.log.Debug("records answer not sent", "peer", from, "err", err)
	}
}

// takeAsker puts the record an asker sent of itself in the view: it came
// over the asker's own stream, so the asker is alive.
func (e *exchange) takeAsker(from peer.ID, sealed []byte) error {
	c, signer, err := gossip.OpenCapability(sealed)
	if err != nil {
		return fmt.Errorf("%w: the asker's record: %w", ErrRecords, err)
	}
	if signer != from {
		return fmt.Errorf("%w: %s sent a record of %s as its own", ErrRecords, from, signer)
	}
	e.s.learnAddrs(c)
	e.s.view.observe(c, sealed, time.Now(), remoteAddr(e.s.host, from), e.s.keep.currentLease())
	return nil
}

// admit reports whether from may be answered now (and counts it in).
func (e *exchange) admit(from peer.ID, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.serving >= maxServing || now.Sub(e.served[from]) < serveGap {
		return false
	}
	if len(e.served) >= 4096 {
		for id, t := range e.served {
			if now.Sub(t) >= serveGap {
				delete(e.served, id)
			}
		}
	}
	e.served[from] = now
	e.serving++
	return true
}

// connected asks a newly connected peer for its record unless the table
// holds it alive already, or would not take it (its bound of neighbours
// is reached: a peer it needs asks, or is asked by LearnHolders), and a
// sample too while this peer knows few. A
// peer that connects while it starts may not serve the exchange yet: it
// is asked again, up to connectTries times, backing off.
func (e *exchange) connected(ctx context.Context, id peer.ID) {
	wait := 500 * time.Millisecond
	for try := 1; ; try++ {
		if id == e.s.host.ID() || e.s.view.Alive(id) || len(e.s.host.Network().ConnsToPeer(id)) == 0 ||
			!e.s.view.Room(id, nil, time.Now()) {
			return
		}
		_, err := e.fetch1(ctx, id)
		if err == nil || ctx.Err() != nil {
			return
		}
		e.s.log.Debug("record exchange failed", "peer", id, "try", try, "err", err)
		if try == connectTries {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// Fetch asks id for its current record (and a sample of the records it
// holds while this peer knows fewer than sampleBelowPeers live peers),
// and puts what it learns in the view: id's own record is its answer, so
// id is alive; the sample's peers are leads, probed first. It returns
// id's record. A peer asked within fetchGap is not asked again.
func (e *exchange) Fetch(ctx context.Context, id peer.ID) (*gossip.Capability, error) {
	now := time.Now()
	e.mu.Lock()
	if q, ok := e.inflight[id]; ok {
		return e.joinLocked(ctx, q)
	}
	if now.Sub(e.asked[id]) < fetchGap {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: %s asked within %s", ErrRecords, id, fetchGap)
	}
	e.mu.Unlock()
	return e.fetch1(ctx, id)
}

// fetch1 is Fetch without the fetchGap check (connected's retries).
func (e *exchange) fetch1(ctx context.Context, id peer.ID) (c *gossip.Capability, err error) {
	now := time.Now()
	e.mu.Lock()
	if len(e.asked) >= 4096 {
		for p, t := range e.asked {
			if now.Sub(t) >= fetchGap {
				delete(e.asked, p)
			}
		}
	}
	if q, ok := e.inflight[id]; ok {
		return e.joinLocked(ctx, q)
	}
	e.asked[id] = now
	q := &question{done: make(chan struct{})}
	e.inflight[id] = q
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.inflight, id)
		e.mu.Unlock()
		q.c, q.err = c, err
		close(q.done)
	}()
	return e.ask1(ctx, id)
}

// ask1 asks id once and puts what it learns in the view.
func (e *exchange) ask1(ctx context.Context, id peer.ID) (*gossip.Capability, error) {
	select {
	case e.fetch <- struct{}{}:
		defer func() { <-e.fetch }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	sample := 0
	if e.s.liveCount() < sampleBelowPeers {
		sample = MaxSample
	}
	self, err := e.s.sealedSelf()
	if err != nil {
		return nil, fmt.Errorf("%w: this peer's record: %w", ErrRecords, err)
	}
	ans, err := e.ask(ctx, id, recordsRequest{Sample: sample, Self: self})
	if err != nil {
		return nil, err
	}
	c, signer, err := gossip.OpenCapability(ans.Self)
	if err != nil {
		return nil, fmt.Errorf("%w: %s's record: %w", ErrRecords, id, err)
	}
	if signer != id {
		return nil, fmt.Errorf("%w: %s answered with a record of %s", ErrRecords, id, signer)
	}
	got := time.Now()
	defer e.s.heardFirst() // after the sample is in the view
	e.s.learnAddrs(c)
	e.s.view.observe(c, ans.Self, got, remoteAddr(e.s.host, id), e.s.keep.currentLease())
	e.s.view.holdsUs(id, ans.Held)
	bad := 0
	for _, b := range ans.Sample {
		rc, sid, err := gossip.OpenCapability(b)
		if err != nil {
			bad++
			continue
		}
		if sid == e.s.host.ID() || sid == id {
			continue
		}
		e.s.lead(sid, rc, b, got)
	}
	if bad > 0 {
		e.s.log.Debug("records in a sample did not verify", "peer", id, "bad", bad, "of", len(ans.Sample))
	}
	return c, nil
}

// check asks id whether its record is newer than the one the table
// holds (sequence number have): an answer of any kind is id's, so id is
// alive; a newer record goes in the view with it. An answer that refuses
// (id was asked within serveGap, or serves too many) is an answer too.
func (e *exchange) check(ctx context.Context, id peer.ID, have uint64) error {
	err := e.checkWith(ctx, id, recordsRequest{Have: have})
	var refused *refusal
	if errors.As(err, &refused) {
		return nil
	}
	return err
}

// checkWith is check with the request req (whose Have is set), a refusal
// an error.
func (e *exchange) checkWith(ctx context.Context, id peer.ID, req recordsRequest) error {
	ans, err := e.ask(ctx, id, req)
	if err != nil {
		return err
	}
	e.s.view.holdsUs(id, ans.Held)
	if ans.Self == nil {
		return nil
	}
	c, signer, err := gossip.OpenCapability(ans.Self)
	if err != nil {
		return fmt.Errorf("%w: %s's record: %w", ErrRecords, id, err)
	}
	if signer != id {
		return fmt.Errorf("%w: %s answered with a record of %s", ErrRecords, id, signer)
	}
	e.s.learnAddrs(c)
	e.s.view.observe(c, ans.Self, time.Now(), remoteAddr(e.s.host, id), e.s.keep.currentLease())
	return nil
}

// refusal is an answer that refused the question, with the answerer's
// reason.
type refusal struct {
	id     peer.ID
	reason string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("%s: %s refused: %.200s", ErrRecords, r.id, r.reason)
}

func (r *refusal) Unwrap() error { return ErrRecords }

func (e *exchange) ask(ctx context.Context, id peer.ID, req recordsRequest) (*recordsAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
	st, err := e.s.host.NewStream(network.WithAllowLimitedConn(ctx, "records"), id, RecordsProtocol, RecordsProtocolV1)
	if err != nil {
		return nil, fmt.Errorf("%w: opening a stream to %s: %w", ErrRecords, id, err)
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(exchangeTimeout))
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	if err := recordFrames.WriteJSON(st, 0, req, maxRequestBytes); err != nil {
		return nil, fmt.Errorf("%w: asking %s: %w", ErrRecords, id, err)
	}
	st.CloseWrite()
	var ans recordsAnswer
	_, body, err := recordFrames.Read(st, maxAnswerBytes, nil)
	if err == nil {
		err = recordFrames.DecodeJSON(body, &ans)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: answer of %s: %w", ErrRecords, id, err)
	}
	if ans.Error != "" {
		return nil, &refusal{id, ans.Error}
	}
	if ans.Self == nil && req.Have == 0 {
		return nil, fmt.Errorf("%w: %s answered without its record", ErrRecords, id)
	}
	if len(ans.Sample) > MaxSample {
		return nil, fmt.Errorf("%w: %s sent %d sample records (max %d)", ErrRecords, id, len(ans.Sample), MaxSample)
	}
	return &ans, nil
}
