package gossip

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/llmswarm/llmswarm/bmc"
)

var testBoardKey = bytes.Repeat([]byte{7}, bmc.KeySize)

// boardTable returns a table as a bridge gets it from bmc.Bridge.Table:
// signed by the board key for a nonce, verified, parsed.
func boardTable(t testing.TB, boot, seq uint32, uptime time.Duration, nodes ...peer.ID) *bmc.Table {
	t.Helper()
	tab := &bmc.Table{Boot: boot, Seq: seq, Uptime: uptime, Period: 3 * time.Second, Misses: 2}
	model := bmc.HandleFor([]byte("model"))
	for i, id := range nodes {
		h := bmc.HandleFor([]byte(id))
		tab.Nodes = append(tab.Nodes, bmc.Node{Handle: h, Live: i%2 == 0, Age: time.Duration(i) * time.Second})
		tab.Parts = append(tab.Parts, bmc.Partition{Node: h, Model: model, First: uint16(4 * i), End: uint16(4*i + 4)})
	}
	nonce, err := bmc.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bmc.SignTable(testBoardKey, nonce, tab)
	if err != nil {
		t.Fatal(err)
	}
	out, err := bmc.VerifyTable(testBoardKey, nonce, raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sampleBMC(t testing.TB, bridge peer.ID, seq uint64, tab *bmc.Table, nodes ...peer.ID) *BMCTable {
	t.Helper()
	names := map[bmc.Handle]peer.ID{}
	for _, id := range nodes {
		names[bmc.HandleFor([]byte(id))] = id
	}
	models := map[bmc.Handle]string{bmc.HandleFor([]byte("model")): "bafkreimodel"}
	return NewBMCTable(bridge, seq, time.Now(), tab, names, models)
}

func TestBMCSealOpenRoundTrip(t *testing.T) {
	k, id := newKey(t)
	_, a := newKey(t)
	_, b := newKey(t)
	rec := sampleBMC(t, id, 9, boardTable(t, 3, 41, 12345*time.Millisecond, a, b), a, b)
	sealed, err := SealBMCTable(rec, k)
	if err != nil {
		t.Fatal(err)
	}
	got, signer, err := OpenBMCTable(sealed)
	if err != nil {
		t.Fatal(err)
	}
	tab := got.Table()
	if signer != id || got.Seq != 9 || tab == nil || tab.Boot != 3 || tab.Seq != 41 || tab.Uptime != 12345*time.Millisecond {
		t.Fatalf("round trip: signer %s, got %+v, table %+v", signer, got, tab)
	}
	ha, hb := bmc.HandleFor([]byte(a)), bmc.HandleFor([]byte(b))
	if !tab.Live(ha) || !tab.Dead(hb) || got.Nodes[ha.String()] != a.String() || got.Nodes[hb.String()] != b.String() {
		t.Fatalf("nodes: %+v, names %v", tab.Nodes, got.Nodes)
	}
	if len(tab.Parts) != 2 || got.Models[tab.Parts[0].Model.String()] != "bafkreimodel" {
		t.Fatalf("partitions: %+v, models %v", tab.Parts, got.Models)
	}
	if len(sealed) > 4096 {
		t.Errorf("a 2-node table seals to %d bytes", len(sealed))
	}
}

func TestBMCOpenRejects(t *testing.T) {
	k, id := newKey(t)
	other, _ := newKey(t)
	_, a := newKey(t)
	tab := boardTable(t, 1, 5, time.Second, a)
	good, err := SealBMCTable(sampleBMC(t, id, 1, tab, a), k)
	if err != nil {
		t.Fatal(err)
	}
	seal := func(edit func(r *BMCTable)) []byte {
		r := sampleBMC(t, id, 2, tab, a)
		edit(r)
		env, err := record.Seal(r, k) // bypasses SealBMCTable's checks
		if err != nil {
			t.Fatal(err)
		}
		b, _ := env.Marshal()
		return b
	}
	forgedEnv, err := record.Seal(sampleBMC(t, id, 3, tab, a), other)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := forgedEnv.Marshal()
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-80] ^= 0x01
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrBadSignature},
		{"garbage", []byte("not an envelope"), ErrBadSignature},
		{"oversize", make([]byte, MaxRecordBytes+1), ErrTooLarge},
		{"signed by another key", forged, ErrBadSignature},
		{"tampered", tampered, ErrBadSignature},
		{"header does not match dump", seal(func(r *BMCTable) { r.TableSeq++ }), ErrMalformed},
		{"boot does not match dump", seal(func(r *BMCTable) { r.Boot = 9 }), ErrMalformed},
		{"dump edited", seal(func(r *BMCTable) { r.Raw = strings.Replace(r.Raw, " L ", " D ", 1) + "x" }), ErrMalformed},
		{"dump with CR", seal(func(r *BMCTable) { r.Raw = strings.ReplaceAll(r.Raw, "\n", "\r\n") }), ErrMalformed},
		{"dump without signature line", seal(func(r *BMCTable) { r.Raw = r.Raw[:strings.Index(r.Raw, "\nS ")+1] }), ErrMalformed},
		{"bad nonce", seal(func(r *BMCTable) { r.Nonce = "short" }), ErrMalformed},
		{"seq zero", seal(func(r *BMCTable) { r.Seq = 0 }), ErrMalformed},
		{"node name with wrong handle", seal(func(r *BMCTable) {
			for h := range r.Nodes {
				r.Nodes[h] = id.String()
			}
		}), ErrMalformed},
		{"node name not in dump", seal(func(r *BMCTable) { r.Nodes[bmc.HandleFor([]byte(id)).String()] = id.String() }), ErrMalformed},
		{"model name not in dump", seal(func(r *BMCTable) { r.Models["0123456789ab"] = "x" }), ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := OpenBMCTable(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestBMCSealChecksKey(t *testing.T) {
	_, id := newKey(t)
	other, _ := newKey(t)
	rec := sampleBMC(t, id, 1, boardTable(t, 1, 1, time.Second))
	if _, err := SealBMCTable(rec, other); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("sealing another bridge's table: %v", err)
	}
}

func TestBMCUnmarshalStrict(t *testing.T) {
	var r BMCTable
	for _, in := range []string{`{"peer_id":"x","seq":1,"extra":1}`, `{"seq":1}{}`, `[`, `{"boot":-1}`} {
		if err := r.UnmarshalRecord([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("UnmarshalRecord(%s) = %v, want ErrMalformed", in, err)
		}
	}
}

// TestBMCValidator: replays and older publish seqs are ignored, a record
// republished by another peer is rejected, and so is garbage; a record far
// off the receiver's clock is ignored.
func TestBMCValidator(t *testing.T) {
	k, id := newKey(t)
	_, mallory := newKey(t)
	r := &Router{bmcSeqs: newSeqTracker(16), log: discard()}
	seal := func(seq uint64, at time.Time) []byte {
		rec := sampleBMC(t, id, seq, boardTable(t, 1, uint32(seq), time.Duration(seq)*time.Second))
		rec.TimeMS = at.UnixMilli()
		b, err := SealBMCTable(rec, k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	now := time.Now()
	rec5, rec6 := seal(5, now), seal(6, now)
	steps := []struct {
		name string
		from peer.ID
		data []byte
		want pubsub.ValidationResult
	}{
		{"first", id, rec5, pubsub.ValidationAccept},
		{"replayed", id, rec5, pubsub.ValidationIgnore},
		{"newer", id, rec6, pubsub.ValidationAccept},
		{"older after newer", id, rec5, pubsub.ValidationIgnore},
		{"captured long ago", id, seal(7, now.Add(-BMCMaxSkew-time.Second)), pubsub.ValidationIgnore},
		{"from the future", id, seal(8, now.Add(BMCMaxSkew+time.Second)), pubsub.ValidationIgnore},
		{"republished by another peer", mallory, seal(9, now), pubsub.ValidationReject},
		{"garbage", mallory, []byte{1, 2, 3}, pubsub.ValidationReject},
		{"capability on the bmc topic", id, sealedCap(t, k, id), pubsub.ValidationReject},
	}
	for _, s := range steps {
		m := message(s.from, s.data)
		got := r.validateBMCTable(t.Context(), s.from, m)
		if got != s.want {
			t.Fatalf("%s: got %v, want %v", s.name, got, s.want)
		}
		if got == pubsub.ValidationAccept {
			if rec, ok := m.ValidatorData.(*BMCTable); !ok || rec.Table() == nil {
				t.Fatalf("%s: accepted without a parsed table: %#v", s.name, m.ValidatorData)
			}
		}
	}
}

// sealedCap is a valid capability envelope of id, which the BMC topic must
// refuse: another domain and codec.
func sealedCap(t *testing.T, k crypto.PrivKey, id peer.ID) []byte {
	t.Helper()
	b, err := SealCapability(sampleCap(id, 1), k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzOpenBMCTable(f *testing.F) {
	k, id := newKey(f)
	_, a := newKey(f)
	good, err := SealBMCTable(sampleBMC(f, id, 1, boardTable(f, 1, 2, time.Second, a), a), k)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte(`{"peer_id":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, signer, err := OpenBMCTable(b)
		if err != nil {
			return
		}
		if r.PeerID != signer.String() {
			t.Fatalf("accepted table of %s signed by %s", r.PeerID, signer)
		}
		if r.Table() == nil {
			t.Fatal("accepted without a parsed table")
		}
	})
}

func FuzzUnmarshalBMCTable(f *testing.F) {
	_, id := newKey(f)
	_, a := newKey(f)
	b, _ := sampleBMC(f, id, 1, boardTable(f, 1, 2, time.Second, a), a).MarshalRecord()
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"peer_id":"12D3KooW","seq":1,"raw":"T 1 1 1 3000 2\nS x\n"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r BMCTable
		if err := r.UnmarshalRecord(b); err != nil {
			return
		}
		tab := r.Table()
		if tab == nil || tab.Boot != r.Boot || tab.Seq != r.TableSeq || len(tab.Nodes) > bmc.MaxNodes {
			t.Fatalf("decoded a record whose table disagrees: %+v", r)
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded an invalid record: %v", err)
		}
	})
}
