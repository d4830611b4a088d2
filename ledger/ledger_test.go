package ledger

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func newKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

// clock is a ledger's time, moved by the test.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func ledgerAt(id peer.ID, c *clock, o Options) *Ledger {
	l := New(id, o)
	l.now = c.now
	return l
}

// TestReceiptsRefused: a receipt forged (signed by another key than its
// client's), inflated after signing, replayed, for another server, stale,
// self-issued, of an item out of bounds or malformed on the wire is
// refused, and none counts.
func TestReceiptsRefused(t *testing.T) {
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	serverKey, server := newKey(t)
	clientKey, client := newKey(t)
	otherKey, other := newKey(t)
	sl := ledgerAt(server, ck, Options{})
	cl := ledgerAt(client, ck, Options{})
	items := []Item{{Kind: KindMoA, Role: "writer", Tokens: 60}, {Kind: KindStage, Model: "bafyroot", Start: 0, End: 7, Layers: 28, Tokens: 160}}
	for _, it := range items {
		if err := cl.Take(server, it); err != nil {
			t.Fatal(err)
		}
	}
	s, err := cl.Issue(server, items, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeSigned(s.wire())
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Accept(back); err != nil {
		t.Fatalf("a good receipt: %v", err)
	}
	if got := sl.Snapshot()[0]; got.Given != 100 || got.Peer != client.String() {
		t.Fatalf("server's account %+v, want 60 + 160/4 = 100 given to the client", got)
	}
	if got := cl.Snapshot()[0]; got.Taken != 100 || got.Peer != server.String() {
		t.Fatalf("client's account %+v, want 100 taken from the server", got)
	}
	signed := func(r Receipt, key interface{ Sign([]byte) ([]byte, error) }) *Signed {
		sig, _ := key.Sign(r.Encode())
		return &Signed{Receipt: r, Sig: sig}
	}
	r := s.Receipt
	forged := signed(Receipt{Server: r.Server, Client: r.Client, At: r.At, Nonce: r.Nonce + 1, Items: r.Items}, otherKey)
	inflated := *s
	inflated.Items = []Item{{Kind: KindMoA, Role: "writer", Tokens: 100000}}
	stale, _ := Sign(Receipt{Server: server.String(), Client: client.String(), At: ck.t.Add(-11 * time.Minute).UnixMilli(), Nonce: 7, Items: items[:1]}, clientKey)
	ahead, _ := Sign(Receipt{Server: server.String(), Client: client.String(), At: ck.t.Add(11 * time.Minute).UnixMilli(), Nonce: 8, Items: items[:1]}, clientKey)
	elsewhere, _ := cl.Issue(other, items[:1], clientKey)
	selfIssued := signed(Receipt{Server: server.String(), Client: server.String(), At: ck.t.UnixMilli(), Nonce: 9, Items: items[:1]}, serverKey)
	past := signed(Receipt{Server: server.String(), Client: client.String(), At: ck.t.UnixMilli(), Nonce: 10,
		Items: []Item{{Kind: KindStage, Start: 0, End: 4, Layers: 2, Tokens: 5}}}, clientKey)
	for _, c := range []struct {
		name string
		s    *Signed
		want string
	}{
		{"forged", forged, "signature is not the client's"},
		{"inflated", &inflated, "signature is not the client's"},
		{"replayed", s, "already counted"},
		{"stale", stale, "outside the window"},
		{"ahead", ahead, "outside the window"},
		{"another server's", elsewhere, "not this peer"},
		{"self-issued", selfIssued, "done for itself"},
		{"layers past the model", past, "stage item of layers [0,4) of 2"},
	} {
		err := sl.Accept(c.s)
		if !errors.Is(err, ErrBadReceipt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	w := s.wire()
	for name, b := range map[string][]byte{
		"cut":            w[:len(w)-3],
		"trailing bytes": append(append([]byte{}, w...), 0),
		"no tag":         w[1:],
		"model twice":    modelTwice(server.String(), client.String()),
	} {
		if _, err := decodeSigned(b); !errors.Is(err, ErrBadReceipt) {
			t.Errorf("%s: decoded: %v", name, err)
		}
	}
	if got := sl.Snapshot(); len(got) != 1 || got[0].Given != 100 {
		t.Fatalf("after the refused receipts: %+v, want the one good receipt's 100 only", got)
	}
	if _, err := Sign(Receipt{Server: server.String(), Client: other.String(), At: 1, Items: items[:1]}, clientKey); err == nil {
		t.Fatal("signed a receipt as another client")
	}
}

// TestStanding: a peer that served this one more than it took ranks
// above 0, a newcomer at 0, one that took up to its allowance still 0,
// and one that took past it below 0; the figures fade with the half-life.
func TestStanding(t *testing.T) {
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	_, self := newKey(t)
	l := ledgerAt(self, ck, Options{Allowance: 100, HalfLife: time.Hour})
	contributorKey, contributor := newKey(t)
	takerKey, taker := newKey(t)
	_, newcomer := newKey(t)
	// This peer took 300 from the contributor.
	if err := l.Take(contributor, Item{Kind: KindStage, Start: 0, End: 14, Layers: 28, Tokens: 600}); err != nil {
		t.Fatal(err)
	}
	give := func(key crypto.PrivKey, tokens int64) {
		t.Helper()
		other := New(mustID(t, key), Options{})
		other.now = ck.now
		s, err := other.Issue(self, []Item{{Kind: KindMoA, Tokens: tokens}}, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Accept(s); err != nil {
			t.Fatal(err)
		}
	}
	give(contributorKey, 50) // and gave it 50
	give(takerKey, 80)
	if s := l.Standing(taker); s != 0 {
		t.Fatalf("a taker within its allowance stands at %g, want 0", s)
	}
	give(takerKey, 220) // 300 in all: 200 past its allowance
	if c, n, k := l.Standing(contributor), l.Standing(newcomer), l.Standing(taker); !(c > 0 && n == 0 && k < 0) {
		t.Fatalf("standings: contributor %g, newcomer %g, taker %g", c, n, k)
	}
	if c, k := l.Standing(contributor), l.Standing(taker); c < 0.7 || k > -0.6 {
		t.Fatalf("contributor owed 250 stands at %g, taker 200 past 100 at %g: want about 0.71 and -0.67", c, k)
	}
	ck.t = ck.t.Add(2 * time.Hour) // a quarter of every figure left
	e := l.Snapshot()              // the largest balances first: the taker's -75, the contributor's 62.5
	if len(e) != 2 || e[1].Peer != contributor.String() || e[1].Balance < 62 || e[1].Balance > 63 || e[0].Balance != -75 {
		t.Fatalf("after two half-lives: %+v, want the taker's 300 faded to 75 and the contributor's 250 to 62.5", e)
	}
	if k := l.Standing(taker); k != 0 {
		t.Fatalf("a taker's 300 faded to 75 is within its allowance again: standing %g", k)
	}
}

func mustID(t testing.TB, k crypto.PrivKey) peer.ID {
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestLedgerSurvivesRestart: what a ledger holds, its seen nonces
// included, comes back from its file, so a receipt replayed after a
// restart is still refused; a file of another peer, of another format or
// malformed is refused naming it, never silently emptied.
func TestLedgerSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.json")
	ck := &clock{t: time.Now()}
	_, self := newKey(t)
	clientKey, client := newKey(t)
	l, err := Load(path, self, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl := ledgerAt(client, ck, Options{})
	s, err := cl.Issue(self, []Item{{Kind: KindShard, Model: "bafyroot", Bytes: 3 << 20}}, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Accept(s); err != nil {
		t.Fatal(err)
	}
	if err := l.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path, self, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if e := back.Snapshot(); len(e) != 1 || e[0].Peer != client.String() || e[0].Given < 2.99 || e[0].Given > 3 {
		t.Fatalf("reloaded: %+v, want 3 (MiB of shard) given to the client", e)
	}
	if err := back.Accept(s); !errors.Is(err, ErrBadReceipt) {
		t.Fatalf("a receipt replayed after a restart: %v", err)
	}
	_, stranger := newKey(t)
	if _, err := Load(path, stranger, Options{}); err == nil || !strings.Contains(err.Error(), "not of this peer") {
		t.Fatalf("another peer's ledger: %v", err)
	}
	for name, body := range map[string]string{
		"malformed":      `{"version":1,`,
		"other format":   `{"version":2,"self":"` + self.String() + `","accounts":{}}`,
		"unknown field":  `{"version":1,"self":"` + self.String() + `","accounts":{},"x":1}`,
		"negative given": `{"version":1,"self":"` + self.String() + `","accounts":{"` + client.String() + `":{"given":-5,"taken":0}}}`,
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path, self, Options{}); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming the file", name, err)
		}
	}
}

// modelTwice is a receipt on the wire whose table of models lists one
// model twice: decodable, but not the receipt's one encoding.
func modelTwice(server, client string) []byte {
	b := []byte(tag)
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	str(server)
	str(client)
	b = binary.BigEndian.AppendUint64(b, 1)
	b = binary.BigEndian.AppendUint64(b, 2)
	b = binary.AppendUvarint(b, 2)
	str("m")
	str("m")
	b = binary.AppendUvarint(b, 1)
	b = append(b, 1)
	b = binary.AppendUvarint(b, 1)
	str("writer")
	for _, n := range []uint64{0, 0, 0, 5, 0} {
		b = binary.AppendUvarint(b, n)
	}
	str("signature")
	return b
}
