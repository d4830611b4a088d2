package node

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/shards"
)

// LedgerFile is this peer's ledger of give and take in its data dir.
const LedgerFile = "ledger.json"

// ledgerSaveEvery is how often a changed ledger is written out (and at
// Close).
const ledgerSaveEvery = 30 * time.Second

// LedgerConfig sets how this peer keeps account of what it gives and
// takes (see docs/trust.md, "Give and take").
type LedgerConfig struct {
	// Reciprocity serves first, when a model is contended, the requests
	// of peers that served this one more than they took. Default true;
	// off, every peer's request waits alike (receipts are still kept).
	Reciprocity *bool `json:"reciprocity,omitempty"`
	// HalfLife is how long what a peer gave or took takes to count half.
	// Default 168h.
	HalfLife Duration `json:"half_life,omitempty"`
	// Allowance is the work (tokens of a whole model) a peer may take
	// beyond what it gave before it ranks below peers that owe nothing.
	// Default 512.
	Allowance float64 `json:"allowance,omitempty"`
	// ReceiptDelay is how long work another peer did for this one waits
	// for more before its receipt is signed and sent to that peer: one
	// signature and one stream for all of it. Default 30s.
	ReceiptDelay Duration `json:"receipt_delay,omitempty"`
}

func (c LedgerConfig) reciprocity() bool { return c.Reciprocity == nil || *c.Reciprocity }

func (c LedgerConfig) validate() error {
	switch {
	case c.HalfLife != 0 && (time.Duration(c.HalfLife) < time.Minute || time.Duration(c.HalfLife) > 365*24*time.Hour):
		return fmt.Errorf("config: ledger.half_life %s: want 1m..8760h", time.Duration(c.HalfLife))
	case c.ReceiptDelay != 0 && (time.Duration(c.ReceiptDelay) < 10*time.Millisecond || time.Duration(c.ReceiptDelay) > time.Hour):
		return fmt.Errorf("config: ledger.receipt_delay %s: want 10ms..1h", time.Duration(c.ReceiptDelay))
	case c.Allowance < 0 || c.Allowance > 1e9:
		return fmt.Errorf("config: ledger.allowance %g: want 0..1e9 (0: the default)", c.Allowance)
	}
	return nil
}

// startLedger loads this peer's ledger and serves the receipt protocol;
// the ledger is saved every ledgerSaveEvery while it changes, and at Close.
func (n *Node) startLedger(ctx context.Context) error {
	path := filepath.Join(n.cfg.DataDir, LedgerFile)
	l, err := ledger.Load(path, n.host.ID(), ledger.Options{HalfLife: time.Duration(n.cfg.Ledger.HalfLife), Allowance: n.cfg.Ledger.Allowance})
	if err != nil {
		return err
	}
	if n.ledger, err = ledger.NewExchange(n.host, l, n.log); err != nil {
		return err
	}
	n.ledger.Delay = time.Duration(n.cfg.Ledger.ReceiptDelay)
	// A voucher counts when signed by a peer this one proved (a
	// challenge passed, no ban) and dealt with.
	n.ledger.Trusted = n.trust.Proven
	n.ledgerDone = make(chan struct{})
	go func() {
		defer close(n.ledgerDone)
		t := time.NewTicker(ledgerSaveEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := l.Save(path); err != nil {
					n.log.Warn("ledger not saved", "err", err)
				}
			}
		}
	}()
	return nil
}

// stopLedger stops taking receipts and saves the ledger.
func (n *Node) stopLedger() error {
	if n.ledger == nil {
		return nil
	}
	n.ledger.Close()
	if n.ledgerDone != nil {
		<-n.ledgerDone
	}
	return n.ledger.Ledger.Save(filepath.Join(n.cfg.DataDir, LedgerFile))
}

// rank is a remote peer's rank for a contended slot: its standing in this
// peer's ledger, or 0 for all with reciprocity off.
func (n *Node) rank(id peer.ID) float64 {
	if n.ledger == nil || !n.cfg.Ledger.reciprocity() {
		return 0
	}
	return n.ledger.Ledger.Standing(id)
}

// Ledger is this peer's accounts of give and take (GET /v1/swarm/ledger).
func (n *Node) Ledger() (client.Ledger, error) {
	n.mu.Lock()
	ex := n.ledger
	n.mu.Unlock()
	if ex == nil {
		return client.Ledger{}, ErrNotRunning
	}
	o := ex.Ledger.Options()
	out := client.Ledger{Reciprocity: n.cfg.Ledger.reciprocity(), HalfLifeS: o.HalfLife.Seconds(), Allowance: o.Allowance,
		Accounts: []client.LedgerAccount{}}
	for _, e := range ex.Ledger.Snapshot() {
		out.Given += e.Given
		out.Taken += e.Taken
		out.Accounts = append(out.Accounts, client.LedgerAccount{Peer: e.Peer, Given: e.Given, Taken: e.Taken, Vouched: e.Vouched,
			Balance: e.Balance, Standing: e.Standing, First: e.First, Last: e.Last})
	}
	return out, nil
}

// ledgerSummary is the ledger's line in the status.
func (n *Node) ledgerSummary() client.LedgerSummary {
	out := client.LedgerSummary{Reciprocity: n.cfg.Ledger.reciprocity()}
	n.mu.Lock()
	ex := n.ledger
	n.mu.Unlock()
	if ex != nil {
		out.Peers, out.Given, out.Taken = ex.Ledger.Totals()
	}
	return out
}

// fetched collects what peers sent of a shard fetch (shards.WithReceived),
// acknowledged once the fetch is verified whole.
type fetched struct {
	mu  sync.Mutex
	got map[peer.ID]int64
}

// option is a fetch option that collects what each source sent.
func (f *fetched) option() shards.FetchOption {
	return shards.WithReceived(func(p peer.ID, b int64) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.got == nil {
			f.got = map[peer.ID]int64{}
		}
		f.got[p] += b
	})
}

// ack acknowledges the bytes of model that from sent, the source whose
// file was verified, once: a source whose file hashed to what it
// announced but failed the model's manifest gets nothing.
func (f *fetched) ack(n *Node, model string, from peer.ID) {
	f.mu.Lock()
	b := f.got[from]
	f.got = nil
	f.mu.Unlock()
	if n.ledger != nil && b > 0 {
		n.ledger.Ack(from, ledger.Item{Kind: ledger.KindShard, Model: model, Bytes: b})
	}
}
