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

	"github.com/llmswarm/llmswarm/internal/wire"
)

// ProtocolID is the receipt protocol: a client sends the receipts of work
// a server did for it, the server answers what it counted.
const ProtocolID = "/swarm/receipt/1.0.0"

// Limits of the receipt protocol.
const (
	maxFrame    = 64 << 10 // one batch, one answer
	maxReceipts = 64       // receipts in one batch
	sendTimeout = 10 * time.Second
	maxSending  = 16 // batches in flight from this peer
)

var frames = &wire.Codec{Err: ErrBadReceipt}

// batch is what a client sends: receipts of work the server did for it.
type batch struct {
	Receipts []*Signed `json:"receipts"`
}

// answer is what the server says of a batch: how many it counted, and
// why it refused the others (by index).
type answer struct {
	Counted int            `json:"counted"`
	Refused map[int]string `json:"refused,omitempty"`
}

// Exchange sends this peer's receipts to the peers that served it and
// takes the receipts of the peers it served.
type Exchange struct {
	Ledger *Ledger
	h      host.Host
	key    crypto.PrivKey
	log    *slog.Logger
	sem    chan struct{}
	wg     sync.WaitGroup
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
	e := &Exchange{Ledger: l, h: h, key: key, log: log, sem: make(chan struct{}, maxSending)}
	h.SetStreamHandler(ProtocolID, e.handle)
	return e, nil
}

// Ack signs a receipt for work server did for this peer, counts it as
// taken, and sends it to server in the background (a failure is logged:
// the server then counts nothing, this peer's ledger does).
func (e *Exchange) Ack(server peer.ID, r Receipt) {
	r.Server = server.String()
	s, err := e.Ledger.Issue(r, e.key)
	if err != nil {
		e.log.Warn("ledger: receipt not signed", "server", server, "err", err)
		return
	}
	select {
	case e.sem <- struct{}{}:
	default:
		e.log.Debug("ledger: too many receipts in flight, one not sent", "server", server)
		return
	}
	e.wg.Add(1)
	go func() {
		defer func() { <-e.sem; e.wg.Done() }()
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		defer cancel()
		if err := e.Send(ctx, server, s); err != nil {
			e.log.Debug("ledger: receipt not delivered", "server", server, "err", err)
		}
	}()
}

// Send sends receipts to server and returns an error naming each it
// refused.
func (e *Exchange) Send(ctx context.Context, server peer.ID, receipts ...*Signed) error {
	if len(receipts) == 0 || len(receipts) > maxReceipts {
		return fmt.Errorf("%w: a batch of %d receipts (1..%d)", ErrBadReceipt, len(receipts), maxReceipts)
	}
	st, err := e.h.NewStream(network.WithAllowLimitedConn(ctx, ProtocolID), server, ProtocolID)
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	if err := frames.WriteJSON(st, 0, &batch{Receipts: receipts}, maxFrame); err != nil {
		st.Reset()
		return err
	}
	st.CloseWrite()
	_, body, err := frames.Read(st, maxFrame, nil)
	if err != nil {
		return err
	}
	var a answer
	if err := frames.DecodeJSON(body, &a); err != nil {
		return err
	}
	if len(a.Refused) > 0 {
		return fmt.Errorf("%w: %d of %d refused: %v", ErrBadReceipt, len(a.Refused), len(receipts), a.Refused)
	}
	return nil
}

// handle takes one batch: each receipt must be the sender's own, for work
// this peer did.
func (e *Exchange) handle(st network.Stream) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(sendTimeout))
	_, body, err := frames.Read(st, maxFrame, nil)
	if err != nil {
		st.Reset()
		return
	}
	var b batch
	a := answer{Refused: map[int]string{}}
	if err := frames.DecodeJSON(body, &b); err != nil || len(b.Receipts) == 0 || len(b.Receipts) > maxReceipts {
		a.Refused[-1] = fmt.Sprintf("a batch of 1..%d receipts: %v", maxReceipts, err)
	}
	remote := st.Conn().RemotePeer().String()
	for i, s := range b.Receipts {
		switch {
		case s == nil:
			a.Refused[i] = "no receipt"
		case s.Client != remote:
			a.Refused[i] = fmt.Sprintf("a receipt of client %s sent by %s: only the client sends its receipts", short(s.Client), short(remote))
		default:
			if err := e.Ledger.Accept(s); err != nil {
				a.Refused[i] = err.Error()
			} else {
				a.Counted++
			}
		}
	}
	if len(a.Refused) > 0 {
		e.log.Debug("ledger: receipts refused", "peer", remote, "refused", a.Refused)
	}
	frames.WriteJSON(st, 0, &a, maxFrame)
}

// Close stops taking receipts and waits for the ones being sent.
func (e *Exchange) Close() {
	e.h.RemoveStreamHandler(ProtocolID)
	e.wg.Wait()
}
