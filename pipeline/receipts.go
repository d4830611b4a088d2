package pipeline

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/ledger"
)

// ackChain acknowledges the work a route did for this peer: to each
// remote hop, a receipt for the positions this peer sent down the route
// and got results for, through the hop's layers. A hop this peer bans
// now (it lied) gets none.
func (o *Originator) ackChain(c *chain) {
	if o.Acknowledge == nil {
		return
	}
	for _, h := range c.open.Route {
		id, err := peer.Decode(h.Peer)
		if err != nil || id == o.Host.ID() {
			continue
		}
		if o.banned(id) {
			continue
		}
		o.Acknowledge(id, ledger.Item{Kind: ledger.KindStage, Model: c.open.Model, Start: h.Start, End: h.End,
			Layers: c.open.Layers, Tokens: int64(c.sent)})
	}
}

// banned reports whether this peer's trust ledger bans id now.
func (o *Originator) banned(id peer.ID) bool {
	if o.View == nil {
		return false
	}
	tr := o.View.Trust()
	if tr == nil {
		return false
	}
	b, _ := tr.Banned(id)
	return b
}

// introduce presents this peer's vouchers to the remote hops of a route
// about to open (Introduce).
func (o *Originator) introduce(hops []Hop) {
	if o.Introduce == nil {
		return
	}
	for _, h := range hops {
		if id, err := peer.Decode(h.Peer); err == nil && id != o.Host.ID() {
			o.Introduce(id)
		}
	}
}
