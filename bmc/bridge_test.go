package bmc_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/bmc"
)

// waitEvent returns the next event of kind, failing after d.
func waitEvent(t *testing.T, b *bmc.Bridge, kind bmc.EventKind, d time.Duration) bmc.Event {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case e, ok := <-b.Events():
			if !ok {
				t.Fatal("events closed")
			}
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event within %v", kind, d)
		}
	}
}

// TestReconnectAfterKill: the emulator dies (EIO on the pty) and comes back;
// the bridge reconnects by itself, the boot id moves on, the tables are
// empty, and the key survives.
func TestReconnectAfterKill(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	key := newKey(t)
	b := openBridge(t, board.Path(), key)
	ctx := ctxT(t, 30*time.Second)
	if e := waitEvent(t, b, bmc.EventConnected, time.Second); e.Boot != 1 {
		t.Fatalf("first boot id %d", e.Boot)
	}
	if err := b.Provision(ctx, key); err != nil {
		t.Fatal(err)
	}
	node, model := bmc.HandleFor([]byte("peer")), bmc.HandleFor([]byte("model"))
	if _, err := b.Heartbeat(ctx, node, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SetPartition(ctx, bmc.Partition{Node: node, Model: model, First: 0, End: 8}); err != nil {
		t.Fatal(err)
	}
	before, err := b.Table(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := board.Kill(); err != nil {
		t.Fatal(err)
	}
	e := waitEvent(t, b, bmc.EventDisconnected, 5*time.Second)
	t.Logf("disconnect cause: %v", e.Err)
	if _, err := b.Ping(ctx); !errors.Is(err, bmc.ErrDisconnected) {
		t.Fatalf("Ping while unplugged: %v, want ErrDisconnected", err)
	}
	if err := board.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if e := waitEvent(t, b, bmc.EventConnected, 10*time.Second); e.Boot != before.Boot+1 {
		t.Fatalf("boot id after restart %d, want %d", e.Boot, before.Boot+1)
	}
	after, err := b.Table(ctx)
	if err != nil {
		t.Fatalf("table after reconnect: %v", err)
	}
	if after.Boot != before.Boot+1 || len(after.Nodes) != 0 || len(after.Parts) != 0 {
		t.Fatalf("after restart: boot %d nodes %v parts %v", after.Boot, after.Nodes, after.Parts)
	}
	if !after.Newer(before) {
		t.Fatal("restarted board's table not newer")
	}
	if b.Boot() != after.Boot || !b.Connected() {
		t.Fatalf("bridge state boot=%d connected=%v", b.Boot(), b.Connected())
	}
	// A clean stop (SIGTERM) is a device loss too.
	if err := board.Close(); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b, bmc.EventDisconnected, 5*time.Second)
}

// TestProvisioning: an unprovisioned board tracks liveness and partitions
// but will not sign; the key is set once, survives a restart, and cannot be
// replaced.
func TestProvisioning(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	key := newKey(t)
	b := openBridge(t, board.Path(), key)
	ctx := ctxT(t, 30*time.Second)
	info, err := b.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Keyed || info.Proto != bmc.ProtocolVersion || info.MaxNodes != bmc.MaxNodes || info.MaxParts != bmc.MaxParts {
		t.Fatalf("fresh board info %+v", info)
	}
	if _, err := b.Heartbeat(ctx, bmc.HandleFor([]byte("p")), 0); err != nil {
		t.Fatalf("heartbeat on unprovisioned board: %v", err)
	}
	if _, err := b.Table(ctx); !errors.Is(err, bmc.ErrNoKey) {
		t.Fatalf("Table on unprovisioned board: %v, want ErrNoKey", err)
	}
	var de *bmc.DeviceError
	if _, err := b.Table(ctx); !errors.As(err, &de) || de.Code != "nokey" || de.Cmd != "TAB" {
		t.Fatalf("want DeviceError{TAB nokey}, got %v", err)
	}
	if err := b.Provision(ctx, key[:16]); !errors.Is(err, bmc.ErrMalformed) {
		t.Fatalf("short key: %v", err)
	}
	if err := b.Provision(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Table(ctx); err != nil {
		t.Fatalf("Table after provisioning: %v", err)
	}
	if err := b.Provision(ctx, newKey(t)); !errors.Is(err, bmc.ErrProvisioned) {
		t.Fatalf("second provisioning: %v, want ErrProvisioned", err)
	}
	if err := b.Provision(ctx, key); !errors.Is(err, bmc.ErrProvisioned) {
		t.Fatalf("same key again: %v, want ErrProvisioned", err)
	}
	if err := board.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b, bmc.EventDisconnected, 5*time.Second)
	waitEvent(t, b, bmc.EventConnected, 10*time.Second)
	if info, err := b.Info(ctx); err != nil || !info.Keyed || info.Boot != 2 {
		t.Fatalf("after restart: %+v, %v", info, err)
	}
	if err := b.Provision(ctx, newKey(t)); !errors.Is(err, bmc.ErrProvisioned) {
		t.Fatalf("provisioning after restart: %v, want ErrProvisioned", err)
	}
	if _, err := b.Table(ctx); err != nil {
		t.Fatalf("Table after restart: %v", err)
	}
	// A bridge holding the wrong key rejects the board's tables.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wrong := openBridge(t, board.Path(), newKey(t))
	if _, err := wrong.Table(ctx); !errors.Is(err, bmc.ErrBadMAC) {
		t.Fatalf("Table with the wrong key: %v, want ErrBadMAC", err)
	}
}

// TestTableMAC: the firmware's dump verifies, re-encodes byte for byte in
// Go, and every tampered or replayed copy is rejected.
func TestTableMAC(t *testing.T) {
	t.Parallel()
	b, key := provisioned(t)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 3; i++ {
		n := bmc.HandleFor([]byte{byte(i)})
		if _, err := b.Heartbeat(ctx, n, uint8(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.SetPartition(ctx, bmc.Partition{Node: n, Model: bmc.HandleFor([]byte("m")), First: uint16(10 * i), End: uint16(10*i + 10)}); err != nil {
			t.Fatal(err)
		}
	}
	nonce, err := bmc.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.TableRaw(ctx, nonce)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := bmc.VerifyTable(key, nonce, raw)
	if err != nil {
		t.Fatalf("firmware dump does not verify: %v\n%s", err, raw)
	}
	if len(tab.Nodes) != 3 || len(tab.Parts) != 3 || tab.Parts[2].First != 20 || tab.Nodes[2].Load != 2 {
		t.Fatalf("table %+v", tab)
	}
	again, err := bmc.SignTable(key, nonce, tab)
	if err != nil || !bytes.Equal(again, raw) {
		t.Fatalf("Go encoding differs from the firmware's:\n%s\nvs\n%s", again, raw)
	}
	// Replay: the same dump presented for a later request's nonce.
	later, _ := bmc.NewNonce()
	if _, err := bmc.VerifyTable(key, later, raw); !errors.Is(err, bmc.ErrBadMAC) {
		t.Fatalf("replayed dump: %v, want ErrBadMAC", err)
	}
	// Tamper: flip one byte anywhere (skipping flips that stay the same).
	for i := range raw {
		bad := bytes.Clone(raw)
		bad[i] ^= 0x01
		if _, err := bmc.VerifyTable(key, nonce, bad); err == nil {
			t.Fatalf("tampered byte %d (%q -> %q) accepted", i, raw[i], bad[i])
		}
	}
	// Each request uses a fresh nonce, so two dumps never share a MAC.
	t1, err := b.Table(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := b.Table(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if t1.Nonce == t2.Nonce || t1.MAC == t2.MAC || !t2.Newer(t1) {
		t.Fatalf("consecutive tables: nonces %q %q, newer %v", t1.Nonce, t2.Nonce, t2.Newer(t1))
	}
}

func TestBridgeClose(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	b := openBridge(t, board.Path(), nil)
	ctx := ctxT(t, 10*time.Second)
	if _, err := b.Table(ctx); !errors.Is(err, bmc.ErrNoHostKey) {
		t.Fatalf("Table without key: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := b.Ping(ctx); !errors.Is(err, bmc.ErrClosed) {
		t.Fatalf("Ping after Close: %v", err)
	}
	for range b.Events() { // closed: drains and ends
	}
	// The port is free again.
	b2 := openBridge(t, board.Path(), nil)
	if _, err := b2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// Open gives up when ctx ends and nothing answers.
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := bmc.Open(short, t.TempDir()+"/nothing", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open on a missing device: %v", err)
	}
}

// TestResetOnConnectOnPty: a pty cannot pulse DTR; the bridge says so in the
// log and works anyway.
func TestResetOnConnectOnPty(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	ctx := ctxT(t, 10*time.Second)
	b, err := bmc.Open(ctx, board.Path(), &bmc.Options{ResetOnConnect: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
