package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/internal/wire"
)

// ProtocolID is the receipt protocol: a client sends a signed receipt of
// the work a server did for it, the server answers whether it counted it.
const ProtocolID protocol.ID = "/swarm/receipt/1.0.0"

// Limits of the receipt protocol.
const (
	maxFrame    = 64 << 10 // one receipt (MaxItems items), one answer
	sendTimeout = 10 * time.Second
	maxSending  = 16 // receipts in flight from this peer
	// DefaultDelay is how long work waits for more to the same server
	// before its receipt is signed and sent: one signature and one
	// stream for all of it.
	DefaultDelay = 30 * time.Second
)

// frames: a receipt frame's body is the signed receipt's bytes; an
// answer's, strict JSON.
var frames = &wire.Codec{Err: ErrBadReceipt}

// answer is what the server says of a receipt.
type answer struct {
	Counted float64 `json:"counted"`           // the work it counted
	Refused string  `json:"refused,omitempty"` // why it counted nothing
}

// Exchange sends this peer's receipts to the peers that served it and
// takes the receipts of the peers it served.
type Exchange struct {
	Ledger *Ledger
	// Delay is how long work waits for more to the same server before its
	// receipt is sent (DefaultDelay when 0); MaxItems at once send it
	// sooner. Set before use.
	Delay time.Duration
	// Trusted says whether a peer's signature on a voucher counts here
	// (vouch.go): nil, none does. Set before use.
	Trusted func(peer.ID) bool

	h    host.Host
	key  crypto.PrivKey
	log  *slog.Logger
	sem  chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	due  map[peer.ID]*pending
	stop chan struct{}
	once sync.Once
	// introduced are the peers this one presented its vouchers to, and
	// when (vouch_wire.go).
	introduced map[peer.ID]time.Time
}

// pending is the work a server did for this peer not yet in a receipt.
type pending struct {
	items []Item
	timer *time.Timer
}

// add puts it in the pending work: added to an item of the same work
// (kind, model, role, layers) while the sum stays in bounds, so a receipt
// for many answers of one role is one item.
func (p *pending) add(it Item) {
	for i := range p.items {
		o := &p.items[i]
		if o.Kind == it.Kind && o.Model == it.Model && o.Role == it.Role && o.Start == it.Start && o.End == it.End &&
			o.Layers == it.Layers && o.Tokens+it.Tokens <= maxTokens && o.Bytes+it.Bytes <= maxBytes {
			o.Tokens += it.Tokens
			o.Bytes += it.Bytes
			return
		}
	}
	p.items = append(p.items, it)
}

// NewExchange serves ProtocolID on h for l (whose peer is h's).
func NewExchange(h host.Host, l *Ledger, log *slog.Logger) (*Exchange, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key := h.Peerstore().PrivKey(h.ID())
	if key == nil {
		return nil, fmt.Errorf("ledger: the host holds no key of its own to sign receipts with")
	}
	if h.ID() != l.self {
		return nil, fmt.Errorf("ledger: the ledger of %s on the host of %s", l.self, h.ID())
	}
	e := &Exchange{Ledger: l, h: h, key: key, log: log, sem: make(chan struct{}, maxSending),
		due: map[peer.ID]*pending{}, stop: make(chan struct{}), introduced: map[peer.ID]time.Time{}}
	h.SetStreamHandler(ProtocolID, e.handle)
	h.SetStreamHandler(VouchProtocolID, e.handleVouch)
	return e, nil
}

// Ack counts work server did for this peer as taken and queues it for
// server's next receipt, sent after Delay (or at once when MaxItems
// wait). A failure to send is logged: the server then counts nothing,
// this peer's ledger does.
func (e *Exchange) Ack(server peer.ID, it Item) {
	if err := e.Ledger.Take(server, it); err != nil {
		e.log.Warn("ledger: work not acknowledged", "server", server, "err", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.stop:
		return
	default:
	}
	p := e.due[server]
	if p == nil {
		p = &pending{}
		e.due[server] = p
		delay := e.Delay
		if delay <= 0 {
			delay = DefaultDelay
		}
		p.timer = time.AfterFunc(delay, func() { e.flush(server) })
	}
	p.add(it)
	if len(p.items) >= MaxItems {
		p.timer.Stop()
		go e.flush(server)
	}
}

// flush signs and sends the receipt of what server did and is pending.
func (e *Exchange) flush(server peer.ID) {
	e.mu.Lock()
	p := e.due[server]
	delete(e.due, server)
	if p != nil {
		// Counted under the lock that Close takes first: Close waits for
		// every flush that took its work before it looked.
		e.wg.Add(1)
	}
	e.mu.Unlock()
	if p == nil {
		return
	}
	s, err := e.Ledger.Issue(server, p.items, e.key)
	if err != nil {
		e.log.Warn("ledger: receipt not signed", "server", server, "err", err)
		e.wg.Done()
		return
	}
	select {
	case e.sem <- struct{}{}:
	default:
		e.log.Debug("ledger: too many receipts in flight, one not sent", "server", server)
		e.wg.Done()
		return
	}
	go func() {
		defer func() { <-e.sem; e.wg.Done() }()
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		defer cancel()
		if err := e.Send(ctx, server, s); err != nil {
			e.log.Debug("ledger: receipt not delivered", "server", server, "err", err)
		}
	}()
}

// Send sends a signed receipt to server and returns an error saying why
// it refused it.
func (e *Exchange) Send(ctx context.Context, server peer.ID, s *Signed) error {
	var a answer
	if err := e.ask(ctx, server, ProtocolID, s.wire(), &a); err != nil {
		return err
	}
	if a.Refused != "" {
		return fmt.Errorf("%w: refused: %s", ErrBadReceipt, a.Refused)
	}
	return nil
}

// ask sends body as one frame of proto to p, half-closes, and decodes the
// one frame p answers into answer.
func (e *Exchange) ask(ctx context.Context, p peer.ID, proto protocol.ID, body []byte, answer any) error {
	st, err := e.h.NewStream(network.WithAllowLimitedConn(ctx, string(proto)), p, proto)
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	if err := frames.Write(st, 0, body); err != nil {
		st.Reset()
		return err
	}
	st.CloseWrite()
	_, b, err := frames.Read(st, maxFrame, nil)
	if err != nil {
		return err
	}
	return frames.DecodeJSON(b, answer)
}

// take reads the one frame a stream of this peer's protocols carries,
// within sendTimeout; nil (the stream reset) when it could not.
func take(st network.Stream) []byte {
	st.SetDeadline(time.Now().Add(sendTimeout))
	_, body, err := frames.Read(st, maxFrame, nil)
	if err != nil {
		st.Reset()
		return nil
	}
	return body
}

// handle takes one receipt: it must be the sender's own, for work this
// peer did.
func (e *Exchange) handle(st network.Stream) {
	defer st.Close()
	body := take(st)
	if body == nil {
		return
	}
	remote := st.Conn().RemotePeer().String()
	var a answer
	s, err := decodeSigned(body)
	switch {
	case err != nil:
		a.Refused = err.Error()
	case s.Client != remote:
		a.Refused = fmt.Sprintf("a receipt of client %s sent by %s: only the client sends its receipts", short(s.Client), short(remote))
	default:
		if err := e.Ledger.Accept(s); err != nil {
			a.Refused = err.Error()
		} else {
			a.Counted = s.Work()
		}
	}
	if a.Refused != "" {
		e.log.Debug("ledger: receipt refused", "peer", remote, "why", a.Refused)
	}
	frames.WriteJSON(st, 0, &a, maxFrame)
}

// Close sends the receipts pending, stops taking receipts, and waits for
// the ones being sent.
func (e *Exchange) Close() {
	e.once.Do(func() {
		e.mu.Lock()
		close(e.stop)
		var servers []peer.ID
		for p, d := range e.due {
			d.timer.Stop()
			servers = append(servers, p)
		}
		e.mu.Unlock()
		for _, p := range servers {
			e.flush(p)
		}
		e.wg.Wait()
		e.h.RemoveStreamHandler(ProtocolID)
		e.h.RemoveStreamHandler(VouchProtocolID)
	})
}
