package ledger

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// VouchProtocolID is the vouch protocol: a peer presents the receipts
// others signed for its work (Ledger.Vouchers) to a peer it is about to
// ask for work; the receiver answers what it credited.
const VouchProtocolID protocol.ID = "/swarm/vouch/1.0.0"

// introduceEvery is how often a peer presents its vouchers to one peer.
const introduceEvery = 24 * time.Hour

// vouchAnswer is what the receiver says of vouchers.
type vouchAnswer struct {
	Credited float64        `json:"credited"`
	Refused  map[int]string `json:"refused,omitempty"`
}

// Introduce presents this peer's vouchers to server in the background,
// at most once a day per server, before this peer asks it for work: a
// peer that served others is not a stranger there. Nothing happens
// without vouchers.
func (e *Exchange) Introduce(server peer.ID) {
	if len(e.Ledger.Vouchers()) == 0 {
		return
	}
	e.mu.Lock()
	select {
	case <-e.stop:
		e.mu.Unlock()
		return
	default:
	}
	now := time.Now()
	if at, ok := e.introduced[server]; ok && now.Sub(at) < introduceEvery {
		e.mu.Unlock()
		return
	}
	if len(e.introduced) >= maxIntroduced {
		clear(e.introduced) // a day's worth forgotten: some peers hear the vouchers twice
	}
	e.introduced[server] = now
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		defer cancel()
		if credited, err := e.Vouch(ctx, server); err != nil {
			e.log.Debug("ledger: vouchers not taken", "peer", server, "credited", credited, "err", err)
		}
	}()
}

// maxIntroduced bounds the peers Introduce remembers.
const maxIntroduced = 4096

// Vouch presents this peer's vouchers to server now: the credit it gave
// them, and an error saying why it refused any.
func (e *Exchange) Vouch(ctx context.Context, server peer.ID) (float64, error) {
	vs := e.Ledger.Vouchers()
	if len(vs) == 0 {
		return 0, nil
	}
	b := binary.AppendUvarint(nil, uint64(len(vs)))
	for _, v := range vs {
		w := v.wire()
		b = binary.AppendUvarint(b, uint64(len(w)))
		b = append(b, w...)
	}
	var a vouchAnswer
	if err := e.ask(ctx, server, VouchProtocolID, b, &a); err != nil {
		return 0, err
	}
	if len(a.Refused) > 0 {
		return a.Credited, fmt.Errorf("%w: %d of %d vouchers refused: %v", ErrBadReceipt, len(a.Refused), len(vs), a.Refused)
	}
	return a.Credited, nil
}

// handleVouch takes one peer's vouchers.
func (e *Exchange) handleVouch(st network.Stream) {
	defer st.Close()
	body := take(st)
	if body == nil {
		return
	}
	var a vouchAnswer
	vs, err := decodeVouchers(body)
	if err != nil {
		a.Refused = map[int]string{-1: err.Error()}
	} else {
		a.Credited, a.Refused = e.Ledger.Vouched(st.Conn().RemotePeer(), vs, e.Trusted)
	}
	frames.WriteJSON(st, 0, &a, maxFrame)
}

// decodeVouchers parses a vouch frame: a uvarint count (1..MaxVouchers),
// then each receipt as a uvarint length and its bytes.
func decodeVouchers(b []byte) ([]*Signed, error) {
	d := decoder{b: b}
	n := d.uvar(MaxVouchers)
	if d.err == nil && n == 0 {
		d.err = bad("no vouchers")
	}
	var out []*Signed
	for range n {
		m := d.uvar(maxFrame)
		if d.err != nil || len(d.b) < m {
			d.fail()
			break
		}
		v, err := decodeSigned(d.b[:m])
		if err != nil {
			return nil, err
		}
		d.b = d.b[m:]
		out = append(out, v)
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = bad("%d bytes after the vouchers", len(d.b))
	}
	return out, d.err
}
