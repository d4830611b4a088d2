package ledger

import (
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
// self-issued or of a malformed kind is refused, and none counts.
func TestReceiptsRefused(t *testing.T) {
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	serverKey, server := newKey(t)
	clientKey, client := newKey(t)
	otherKey, other := newKey(t)
	_ = serverKey
	sl := ledgerAt(server, ck, Options{})
	cl := ledgerAt(client, ck, Options{})
	good := Receipt{Server: server.String(), Kind: KindMoA, Role: "writer", Tokens: 100}
	s, err := cl.Issue(good, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Accept(s); err != nil {
		t.Fatalf("a good receipt: %v", err)
	}
	if got := sl.Snapshot()[0]; got.Given != 100 || got.Peer != client.String() {
		t.Fatalf("server's account %+v, want 100 given to the client", got)
	}
	if got := cl.Snapshot()[0]; got.Taken != 100 || got.Peer != server.String() {
		t.Fatalf("client's account %+v, want 100 taken from the server", got)
	}

	forged := *s
	forged.Nonce++
	forged.Sig, _ = otherKey.Sign(forged.SignedBytes()) // another key signs as the client
	inflated := *s
	inflated.Nonce += 2
	inflated.Tokens = 100000
	stale, _ := Sign(Receipt{Server: server.String(), Client: client.String(), Kind: KindMoA, Tokens: 5,
		At: ck.t.Add(-11 * time.Minute).UnixMilli(), Nonce: 7}, clientKey)
	ahead, _ := Sign(Receipt{Server: server.String(), Client: client.String(), Kind: KindMoA, Tokens: 5,
		At: ck.t.Add(11 * time.Minute).UnixMilli(), Nonce: 8}, clientKey)
	elsewhere, _ := cl.Issue(Receipt{Server: other.String(), Kind: KindMoA, Tokens: 5}, clientKey)
	selfIssued := &Signed{Receipt: Receipt{Server: server.String(), Client: server.String(), Kind: KindMoA, Tokens: 5, At: ck.t.UnixMilli(), Nonce: 9}}
	selfIssued.Sig, _ = serverKey.Sign(selfIssued.SignedBytes())
	noWork := &Signed{Receipt: Receipt{Server: server.String(), Client: client.String(), Kind: KindStage, Start: 0, End: 4, Layers: 2, Tokens: 5,
		At: ck.t.UnixMilli(), Nonce: 10}}
	noWork.Sig, _ = clientKey.Sign(noWork.SignedBytes())
	for _, c := range []struct {
		name string
		s    *Signed
		want string
	}{
		{"forged", &forged, "signature is not the client's"},
		{"inflated", &inflated, "signature is not the client's"},
		{"replayed", s, "already counted"},
		{"stale", stale, "outside the window"},
		{"ahead", ahead, "outside the window"},
		{"another server's", elsewhere, "not this peer"},
		{"self-issued", selfIssued, "done for itself"},
		{"layers past the model", noWork, "stage receipt of layers [0,4) of 2"},
	} {
		err := sl.Accept(c.s)
		if !errors.Is(err, ErrBadReceipt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if got := sl.Snapshot(); len(got) != 1 || got[0].Given != 100 {
		t.Fatalf("after the refused receipts: %+v, want the one good receipt's 100 only", got)
	}
	if _, err := Sign(Receipt{Server: server.String(), Client: other.String(), Kind: KindMoA, Tokens: 1, At: 1}, clientKey); err == nil {
		t.Fatal("signed a receipt as another client")
	}
}

// TestStanding: a peer that served this one more than it took ranks
// above 0, a newcomer at 0, one that took up to its allowance still 0,
// and one that took past it below 0; the figures fade with the half-life.
func TestStanding(t *testing.T) {
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	selfKey, self := newKey(t)
	l := ledgerAt(self, ck, Options{Allowance: 100, HalfLife: time.Hour})
	contributorKey, contributor := newKey(t)
	takerKey, taker := newKey(t)
	_, newcomer := newKey(t)
	// This peer took 300 from the contributor.
	if _, err := l.Issue(Receipt{Server: contributor.String(), Kind: KindStage, Start: 0, End: 14, Layers: 28, Tokens: 600}, selfKey); err != nil {
		t.Fatal(err)
	}
	give := func(key crypto.PrivKey, tokens int64) {
		t.Helper()
		other := New(mustID(t, key), Options{})
		other.now = ck.now
		s, err := other.Issue(Receipt{Server: self.String(), Kind: KindMoA, Tokens: tokens}, key)
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
	s, err := cl.Issue(Receipt{Server: self.String(), Kind: KindShard, Model: "bafyroot", Bytes: 3 << 20}, clientKey)
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
