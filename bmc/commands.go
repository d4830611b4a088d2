package bmc

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"
)

// Ping asks the board for its uptime and returns the round-trip time.
func (b *Bridge) Ping(ctx context.Context) (time.Duration, error) {
	var start time.Time
	req, _ := EncodePing("")
	start = time.Now()
	err := b.do(ctx, req, b.opts.Timeout, func(r Reply) (bool, error) {
		p, ok := r.(Pong)
		return ok && p.Token == "", nil
	})
	if err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// Info returns the board's firmware, protocol, boot id and key state.
func (b *Bridge) Info(ctx context.Context) (Info, error) {
	var in Info
	err := b.do(ctx, []byte("INFO\n"), b.opts.Timeout, func(r Reply) (bool, error) {
		v, ok := r.(Info)
		in = v
		return ok, nil
	})
	return in, err
}

// Stat returns the board's counters.
func (b *Bridge) Stat(ctx context.Context) (Stat, error) {
	var st Stat
	err := b.do(ctx, []byte("STAT\n"), b.opts.Timeout, func(r Reply) (bool, error) {
		v, ok := r.(Stat)
		st = v
		return ok, nil
	})
	return st, err
}

// Config returns the board's liveness rule.
func (b *Bridge) Config(ctx context.Context) (Config, error) {
	var c Config
	err := b.do(ctx, []byte("CFG\n"), b.opts.Timeout, func(r Reply) (bool, error) {
		v, ok := r.(Config)
		c = v
		return ok, nil
	})
	return c, err
}

// SetConfig changes the board's liveness rule until its next reset (set
// Options.Config to apply it on every connect).
func (b *Bridge) SetConfig(ctx context.Context, c Config) (seq uint32, err error) {
	req, err := EncodeConfig(c)
	return seq, b.checkedDo(ctx, req, err, acceptOK(&seq))
}

// Heartbeat tells the board node is alive, with a host-defined load value.
// A node the board does not know takes a free slot (ErrFull if none); a dead
// node becomes live again.
func (b *Bridge) Heartbeat(ctx context.Context, node Handle, load uint8) (seq uint32, err error) {
	req, err := EncodeHeartbeat(node, load)
	return seq, b.checkedDo(ctx, req, err, acceptOK(&seq))
}

// ForgetNode removes a node's liveness entry (ErrNotFound if absent).
func (b *Bridge) ForgetNode(ctx context.Context, node Handle) (seq uint32, err error) {
	req, err := EncodeForgetNode(node)
	return seq, b.checkedDo(ctx, req, err, acceptOK(&seq))
}

// ClearNodes removes every liveness entry.
func (b *Bridge) ClearNodes(ctx context.Context) (seq uint32, err error) {
	return seq, b.do(ctx, []byte("NCLR\n"), b.opts.Timeout, acceptOK(&seq))
}

// SetPartition records that p.Node holds layers [p.First, p.End) of p.Model,
// replacing that node's previous range of the model (ErrFull if no slot).
func (b *Bridge) SetPartition(ctx context.Context, p Partition) (seq uint32, err error) {
	req, err := EncodeSetPartition(p)
	return seq, b.checkedDo(ctx, req, err, acceptOK(&seq))
}

// DeletePartition removes node's range of model (ErrNotFound if absent).
func (b *Bridge) DeletePartition(ctx context.Context, node, model Handle) (seq uint32, err error) {
	req, err := EncodeDeletePartition(node, model)
	return seq, b.checkedDo(ctx, req, err, acceptOK(&seq))
}

// Provision stores key in the board's EEPROM. It works once per board:
// afterwards the board answers ErrProvisioned.
func (b *Bridge) Provision(ctx context.Context, key []byte) error {
	req, err := EncodeKey(key)
	return b.checkedDo(ctx, req, err, acceptOK(nil))
}

// NewNonce returns a fresh random TAB nonce (16 bytes, base64url).
func NewNonce() (string, error) {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", fmt.Errorf("bmc: nonce: %w", err)
	}
	return b64.EncodeToString(n[:]), nil
}

// Table asks the board for its tables under a fresh nonce and returns them
// once the MAC verifies with Options.Key. An unprovisioned board answers
// ErrNoKey.
func (b *Bridge) Table(ctx context.Context) (*Table, error) {
	if b.opts.Key == nil {
		return nil, ErrNoHostKey
	}
	nonce, err := NewNonce()
	if err != nil {
		return nil, err
	}
	raw, err := b.TableRaw(ctx, nonce)
	if err != nil {
		return nil, err
	}
	t, err := VerifyTable(b.opts.Key, nonce, raw)
	if err != nil {
		return nil, fmt.Errorf("bmc: TAB: %w", err)
	}
	return t, nil
}

// TableRaw sends TAB with the given nonce and returns the dump as received,
// LF-terminated, without verifying it. Use Table unless you need the raw
// bytes for a nonce you chose.
func (b *Bridge) TableRaw(ctx context.Context, nonce string) ([]byte, error) {
	req, err := EncodeTab(nonce)
	if err != nil {
		return nil, err
	}
	var raw []byte
	started := false
	err = b.do(ctx, req, 3*b.opts.Timeout, func(r Reply) (bool, error) {
		switch r.(type) {
		case Header:
			raw, started = append(raw[:0], r.String()+"\n"...), true
			return false, nil
		case Node, Partition:
			if started {
				raw = append(raw, r.String()+"\n"...)
			}
			return false, nil
		case Signature:
			if !started {
				return false, nil
			}
			raw = append(raw, r.String()+"\n"...)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return raw, nil
}
