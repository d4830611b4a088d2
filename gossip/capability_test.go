package gossip

import (
	"errors"
	"math"
	"strings"
	"testing"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
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

func sampleCap(id peer.ID, seq uint64) *Capability {
	return &Capability{
		PeerID:   id.String(),
		Seq:      seq,
		Addrs:    []string{"/ip4/127.0.0.1/tcp/7434"},
		Platform: Platform{OS: "linux", Arch: "amd64", Cores: 2, RAMBytes: 8 << 30},
		Roles:    []Role{{Role: "reasoner", ModelCID: "bafkreia", ModelName: "qwen3", Quant: "Q8_0", TokPerSec: 30}},
		Shards:   []Shard{{ModelCID: "bafkreib", Start: 0, End: 14, Layers: 28, Hidden: 1024, MsPerLayer: 0.9}},
		Load:     Load{Active: 1, Capacity: 4},
		Thermal:  ThermalNominal,
		Battery:  &Battery{Percent: 80},
	}
}

func message(from peer.ID, data []byte) *pubsub.Message {
	return &pubsub.Message{Message: &pb.Message{From: []byte(from), Data: data}}
}

func TestSealOpenRoundTrip(t *testing.T) {
	k, id := newKey(t)
	c := sampleCap(id, 7)
	b, err := SealCapability(c, k)
	if err != nil {
		t.Fatal(err)
	}
	got, signer, err := OpenCapability(b)
	if err != nil {
		t.Fatal(err)
	}
	if signer != id || got.Seq != 7 || got.Roles[0].Role != "reasoner" || got.Battery.Percent != 80 {
		t.Fatalf("round trip: signer %s, got %+v", signer, got)
	}
}

func TestOpenRejects(t *testing.T) {
	k, id := newKey(t)
	other, otherID := newKey(t)
	good, err := SealCapability(sampleCap(id, 1), k)
	if err != nil {
		t.Fatal(err)
	}
	// A record naming id but signed with another key: seal bypassing the check.
	forgedEnv, err := record.Seal(sampleCap(id, 2), other)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := forgedEnv.Marshal()
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-80] ^= 0xff // inside the payload or signature
	bad := sampleCap(otherID, 3)
	bad.Shards[0].End = 99
	badEnv, _ := record.Seal(bad, other)
	badBytes, _ := badEnv.Marshal()
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
		{"field out of range", badBytes, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := OpenCapability(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestValidateLimits(t *testing.T) {
	_, id := newKey(t)
	cases := []struct {
		name string
		edit func(c *Capability)
		want string
	}{
		{"seq zero", func(c *Capability) { c.Seq = 0 }, "seq"},
		{"bad peer id", func(c *Capability) { c.PeerID = "nope" }, "peer_id"},
		{"too many addrs", func(c *Capability) { c.Addrs = make([]string, maxAddrs+1) }, "addrs"},
		{"role name", func(c *Capability) { c.Roles[0].Role = "Reasoner!" }, "role"},
		{"empty model cid", func(c *Capability) { c.Roles[0].ModelCID = "" }, "model_cid"},
		{"negative speed", func(c *Capability) { c.Roles[0].TokPerSec = -1 }, "tok_s"},
		{"inverted range", func(c *Capability) { c.Shards[0].Start = 20 }, "layers"},
		{"range past end", func(c *Capability) { c.Shards[0].End = 29 }, "layers"},
		{"thermal", func(c *Capability) { c.Thermal = "hot" }, "thermal"},
		{"battery", func(c *Capability) { c.Battery.Percent = 101 }, "battery"},
		{"long version", func(c *Capability) { c.Version = strings.Repeat("v", 200) }, "version"},
		{"too many gpus", func(c *Capability) { c.Platform.GPUs = make([]GPU, maxGPUs+1) }, "gpus"},
		{"long gpu name", func(c *Capability) { c.Platform.GPUs = []GPU{{Backend: "Vulkan", Name: strings.Repeat("g", 200)}} }, "gpus[0]"},
		{"long shard backend", func(c *Capability) { c.Shards[0].Backend = strings.Repeat("b", 200) }, "backend"},
		{"long role backend", func(c *Capability) { c.Roles[0].Backend = strings.Repeat("b", 200) }, "backend"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sampleCap(id, 1)
			tc.edit(c)
			err := c.Validate()
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrMalformed mentioning %q", err, tc.want)
			}
		})
	}
	if err := sampleCap(id, 1).Validate(); err != nil {
		t.Fatalf("valid record rejected: %v", err)
	}
	gpu := sampleCap(id, 1)
	gpu.Platform.GPUs = []GPU{{Backend: "Vulkan", Name: "NVIDIA H200", VRAMBytes: 141 << 30, FreeVRAM: 140 << 30}}
	gpu.Shards[0].Backend, gpu.Roles[0].Backend = "Vulkan 28/28+head", "CPU"
	if err := gpu.Validate(); err != nil {
		t.Fatalf("a GPU peer's record rejected: %v", err)
	}
}

func TestUnmarshalStrict(t *testing.T) {
	var c Capability
	for _, in := range []string{`{"peer_id":"x","seq":1,"extra":1}`, `{"seq":1}{}`, `[`, `{"seq":-1}`} {
		if err := c.UnmarshalRecord([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("UnmarshalRecord(%s) = %v, want ErrMalformed", in, err)
		}
	}
}

func TestValidatorReplayAndRepublish(t *testing.T) {
	k, id := newKey(t)
	_, mallory := newKey(t)
	r := &Router{seqs: newSeqTracker(16)}
	r.log = discard()
	rec5, _ := SealCapability(sampleCap(id, 5), k)
	rec6, _ := SealCapability(sampleCap(id, 6), k)
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
		{"republished by another peer", mallory, rec6, pubsub.ValidationReject},
		{"garbage", mallory, []byte{1, 2, 3}, pubsub.ValidationReject},
	}
	for _, s := range steps {
		if got := r.validateCapability(t.Context(), s.from, message(s.from, s.data)); got != s.want {
			t.Fatalf("%s: got %v, want %v", s.name, got, s.want)
		}
	}
}

func TestSeqTrackerBounded(t *testing.T) {
	tr := newSeqTracker(3)
	ids := make([]peer.ID, 5)
	for i := range ids {
		_, ids[i] = newKey(t)
		if !tr.accept(ids[i], uint64(10+i)) {
			t.Fatalf("peer %d refused", i)
		}
	}
	if len(tr.last) != 3 {
		t.Fatalf("tracker holds %d peers, want 3", len(tr.last))
	}
	if tr.accept(ids[4], 14) {
		t.Fatal("replay accepted")
	}
}

func FuzzOpenCapability(f *testing.F) {
	k, id := newKey(f)
	good, err := SealCapability(sampleCap(id, 1), k)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte(`{"peer_id":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, signer, err := OpenCapability(b)
		if err != nil {
			return
		}
		if c.PeerID != signer.String() {
			t.Fatalf("accepted record for %s signed by %s", c.PeerID, signer)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted invalid record: %v", err)
		}
	})
}

func FuzzUnmarshalCapability(f *testing.F) {
	_, id := newKey(f)
	b, _ := sampleCap(id, 1).MarshalRecord()
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Capability
		if err := c.UnmarshalRecord(b); err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("decoded invalid record: %v", err)
			}
		}
	})
}

func TestTakesWorkAndPowerFactor(t *testing.T) {
	role := []Role{{Role: "reasoner", ModelCID: "m"}}
	for _, c := range []struct {
		cap   Capability
		takes bool
		power float64
	}{
		{Capability{}, true, 1}, // serves nothing: nothing to refuse
		{Capability{Roles: role, Load: Load{Capacity: 4}}, true, 1},
		{Capability{Roles: role, Load: Load{Active: 1}}, false, 1},
		{Capability{Shards: []Shard{{ModelCID: "m", End: 2}}}, false, 1},
		{Capability{Roles: role, Load: Load{Capacity: 4}, Battery: &Battery{Percent: 100}}, true, 0.9},
		{Capability{Roles: role, Load: Load{Capacity: 4}, Battery: &Battery{Percent: 20}}, true, 0.5},
		{Capability{Roles: role, Load: Load{Capacity: 4}, Battery: &Battery{Percent: 5, Charging: true}}, true, 1},
	} {
		if got := c.cap.TakesWork(); got != c.takes {
			t.Errorf("%+v: TakesWork %v, want %v", c.cap, got, c.takes)
		}
		if got := c.cap.PowerFactor(); math.Abs(got-c.power) > 1e-9 {
			t.Errorf("%+v: PowerFactor %v, want %v", c.cap, got, c.power)
		}
	}
}
