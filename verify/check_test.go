package verify

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// shapes are the weight types an honest peer must pass with: q4_k needs
// rows of 256, the small shape.
var shapes = []struct {
	size, typ string
	layers    int
}{
	{"tiny", "f32", 4},
	{"tiny", "q8_0", 4},
	{"small", "q4_k", 8},
}

// TestHonestPeerPasses: a peer computing with the real weights passes,
// for f32, q8_0 and q4_k, whether the checker holds the whole range (every
// layer recomputed) or only one-layer slices (some layers recomputed from
// the trace), for ranges from layer 0, in the middle and to the head; the
// claim is then verified and the peer's speed measured.
func TestHonestPeerPasses(t *testing.T) {
	for _, sh := range shapes {
		t.Run(sh.typ, func(t *testing.T) {
			full, cid := modelOf(t, sh.size, sh.typ, 1)
			n := sh.layers
			ph, _, _ := servingPeer(t, full, cid)
			for _, ref := range []struct {
				name  string
				ref   *fileRef
				whole bool
			}{
				{"whole", newFileRef(t, cid).add(0, n, full), true},
				{"one-layer slices", oneLayerRef(t, full, cid, n), false},
			} {
				for _, rg := range [][2]int{{0, n}, {1, n - 1}, {n / 2, n}, {0, 1}} {
					h := newHost(t)
					link(h, ph)
					c := newChecker(h, ref.ref)
					claim := swarm.Claim{Model: cid, Start: rg[0], End: rg[1]}
					rep, err := c.Check(t.Context(), ph.ID(), claim)
					if err != nil {
						t.Fatalf("%s %v: %v", ref.name, rg, err)
					}
					if rep.Whole != (ref.whole || rg[1]-rg[0] == 1) || rep.Checked[0] != rg[0] || rep.WorstRelErr > 1e-3 {
						t.Fatalf("%s %v: report %+v", ref.name, rg, rep)
					}
					if !c.Trust.Verified(ph.ID(), claim) {
						t.Fatalf("%s %v: claim not verified after a pass", ref.name, rg)
					}
					if v, ok := c.Trust.Speed(ph.ID(), swarm.MsPerLayerKey(cid)); !ok || v <= 0 {
						t.Fatalf("%s %v: no speed measured (%v)", ref.name, rg, v)
					}
					t.Logf("%s %s [%d,%d): checked %v, worst relative error %.2g, %.3f ms/layer, %d+%d bytes",
						sh.typ, ref.name, rg[0], rg[1], rep.Checked, rep.WorstRelErr, rep.MsPerLayer, rep.SentBytes, rep.RecvBytes)
				}
			}
		})
	}
}

// liar answers challenges on the real wire format, computing the honest
// trace with real weights and then lying about it as tamper says.
type liar struct {
	h      host.Host
	m      *engine.Model
	tamper func(req *Request, l int, out []float32) []float32
	refuse string // answer every challenge with this error code
	why    string // and this message ("no" if empty)

	mu     sync.Mutex
	seen   int
	record [][]float32 // the first honest trace (for replay)
	replay bool
}

func newLiar(t *testing.T, full string) *liar {
	t.Helper()
	lr := &liar{h: newHost(t), m: load(t, full)}
	lr.h.SetStreamHandler(ProtocolID, lr.handle)
	return lr
}

func (lr *liar) challenges() int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.seen
}

func (lr *liar) handle(st network.Stream) {
	defer st.Close()
	req, err := ReadRequest(bufio.NewReader(st))
	if err != nil {
		WriteError(st, CodeBadRequest, err.Error())
		return
	}
	lr.mu.Lock()
	lr.seen++
	replayed, refuse := lr.record, lr.refuse
	lr.mu.Unlock()
	if refuse != "" {
		WriteError(st, refuse, cmp.Or(lr.why, "no"))
		return
	}
	if lr.replay && replayed != nil {
		for i, v := range replayed {
			WriteBoundary(st, req.Start+i, v)
		}
		return
	}
	s, err := lr.m.AcquireSession(context.Background())
	if err != nil {
		WriteError(st, CodeBusy, err.Error())
		return
	}
	defer s.Close()
	var trace, sent [][]float32
	var at []int // the layer of each output (one, the last, for a model that runs whole only)
	runLayers(context.Background(), lr.m, s, req.Start, req.End, req.Tokens, req.Hidden, func(l int, out []float32) error {
		trace = append(trace, slices.Clone(out))
		at = append(at, l)
		if lr.tamper != nil {
			out = lr.tamper(req, l, out)
		}
		sent = append(sent, slices.Clone(out))
		return nil
	})
	// Recorded before the answer goes out: the checker's next challenge
	// may come as soon as it has read this one.
	lr.mu.Lock()
	if lr.record == nil {
		lr.record = trace
	}
	lr.mu.Unlock()
	for i, out := range sent {
		if WriteBoundary(st, at[i], out) != nil {
			return
		}
	}
}

// TestLiarsFailTheirFirstChallenge: peers that answer with random numbers,
// scaled numbers, a NaN, a wrong size, a trace made for another input,
// another model's weights, or that refuse layers they claim, each fail
// their first challenge (whether the checker holds the whole range or
// only one-layer slices) and are banned; what was seen is in the ledger.
func TestLiarsFailTheirFirstChallenge(t *testing.T) {
	full, cid := modelOf(t, "tiny", "q8_0", 1)
	other, _ := modelOf(t, "tiny", "q8_0", 2) // same shape, other weights
	const n = 4
	rnd := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name   string
		file   string
		tamper func(req *Request, l int, out []float32) []float32
		refuse string
		replay bool
		fault  string
	}{
		{name: "random", file: full, fault: "off by", tamper: func(_ *Request, _ int, out []float32) []float32 {
			for i := range out {
				out[i] = float32(rnd.NormFloat64())
			}
			return out
		}},
		// 1.1, not 1.01: the model is q8_0, where honest peers on other
		// CPUs differ by up to 1.5e-2 (tolerance.go).
		{name: "scaled by 1.1", file: full, fault: "off by", tamper: func(_ *Request, _ int, out []float32) []float32 {
			for i := range out {
				out[i] *= 1.1
			}
			return out
		}},
		{name: "NaN in the last layer", file: full, fault: "NaN", tamper: func(req *Request, l int, out []float32) []float32 {
			if l == req.End-1 {
				out[len(out)/2] = float32(math.NaN())
			}
			return out
		}},
		{name: "Inf in the first layer", file: full, fault: "Inf", tamper: func(req *Request, l int, out []float32) []float32 {
			if l == req.Start {
				out[0] = float32(math.Inf(-1))
			}
			return out
		}},
		{name: "short trace", file: full, fault: "floats", tamper: func(_ *Request, _ int, out []float32) []float32 {
			return out[:len(out)-1]
		}},
		{name: "other weights", file: other, fault: "off by"},
		{name: "refuses its claimed layers as malformed", file: full, refuse: CodeBadRequest, fault: "refused them"},
	}
	for _, tc := range cases {
		for _, whole := range []bool{true, false} {
			name := tc.name + "/one-layer slices"
			ref := oneLayerRef(t, full, cid, n)
			if whole {
				name, ref = tc.name+"/whole", newFileRef(t, cid).add(0, n, full)
			}
			t.Run(name, func(t *testing.T) {
				lr := newLiar(t, tc.file)
				lr.tamper, lr.refuse = tc.tamper, tc.refuse
				h := newHost(t)
				link(h, lr.h)
				c := newChecker(h, ref)
				claim := swarm.Claim{Model: cid, Start: 0, End: n}
				err := c.Vet(t.Context(), lr.h.ID(), claim)
				var fe *FailError
				if !errors.As(err, &fe) || !strings.Contains(fe.Fault, tc.fault) {
					t.Fatalf("vet: %v, want a failure saying %q", err, tc.fault)
				}
				banned, why := c.Trust.Banned(lr.h.ID())
				if !banned || !strings.Contains(why, tc.fault) || c.Trust.Verified(lr.h.ID(), claim) {
					t.Fatalf("after a failed challenge: banned %v (%q), verified %v", banned, why, c.Trust.Verified(lr.h.ID(), claim))
				}
				// Banned: asked again, it gets no challenge (nor anything else).
				if err := c.Vet(t.Context(), lr.h.ID(), claim); !errors.Is(err, ErrBanned) {
					t.Fatalf("second vet: %v, want ErrBanned", err)
				}
				if got := lr.challenges(); got != 1 {
					t.Fatalf("liar saw %d challenges, want 1", got)
				}
				t.Logf("%s: %v", name, why)
			})
		}
	}
}

// TestNotHeldWithdrawsTheClaim: a peer that refuses layers it claims as
// not held (restarting, loading them) is not banned: its claim is
// withdrawn (proven again before it counts), Vet leaves it out for
// NotHeldRetry without asking, and once it holds the layers again a
// challenge verifies it again.
func TestNotHeldWithdrawsTheClaim(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	lr := newLiar(t, full) // honest until told to refuse
	h := newHost(t)
	link(h, lr.h)
	c := newChecker(h, oneLayerRef(t, full, cid, 4))
	c.NotHeldRetry = 300 * time.Millisecond
	claim := swarm.Claim{Model: cid, Start: 1, End: 3}
	if err := c.Vet(t.Context(), lr.h.ID(), claim); err != nil || !c.Trust.Verified(lr.h.ID(), claim) {
		t.Fatalf("honest holder: %v (verified %v)", err, c.Trust.Verified(lr.h.ID(), claim))
	}
	c.Trust.Agreed(lr.h.ID())
	setRefuse := func(code string) {
		lr.mu.Lock()
		defer lr.mu.Unlock()
		lr.refuse, lr.why = code, "layers not held here (loading)"
	}
	setRefuse(CodeNotHeld)
	// A referee's fresh challenge: refused, no verdict, the claim withdrawn.
	_, err := c.Check(t.Context(), lr.h.ID(), claim)
	var fe *FailError
	if !errors.Is(err, ErrNotHeld) || errors.As(err, &fe) {
		t.Fatalf("refused as not held: %v, want ErrNotHeld and no failure", err)
	}
	if banned, why := c.Trust.Banned(lr.h.ID()); banned {
		t.Fatalf("banned for a refusal: %s", why)
	}
	if c.Trust.Verified(lr.h.ID(), claim) || c.Trust.Checked(lr.h.ID()) != 0 {
		t.Fatalf("after the refusal: verified %v, checked %d; want the claim withdrawn and probation again",
			c.Trust.Verified(lr.h.ID(), claim), c.Trust.Checked(lr.h.ID()))
	}
	// Vet asks, is refused, and leaves the claim out for NotHeldRetry
	// without asking again.
	for range 3 {
		if err := c.Vet(t.Context(), lr.h.ID(), claim); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("vet while refused: %v, want ErrNotHeld", err)
		}
	}
	if got := lr.challenges(); got != 3 { // the first vet, the Check, the vet that was refused
		t.Fatalf("%d challenges, want 3: the refused claim asked again at once", got)
	}
	// Loaded again: the next vet after NotHeldRetry verifies it.
	setRefuse("")
	time.Sleep(c.NotHeldRetry + 50*time.Millisecond)
	if err := c.Vet(t.Context(), lr.h.ID(), claim); err != nil || !c.Trust.Verified(lr.h.ID(), claim) {
		t.Fatalf("loaded again: %v (verified %v)", err, c.Trust.Verified(lr.h.ID(), claim))
	}
	if banned, _ := c.Trust.Banned(lr.h.ID()); banned {
		t.Fatal("banned")
	}
}

// TestReplayedTraceFails: a peer that answered one challenge honestly and
// replays that trace for the next fails it: every challenge is a fresh
// random input, and the first layer is always recomputed from it.
func TestReplayedTraceFails(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	for _, start := range []int{0, 1} { // token input, hidden-state input
		lr := newLiar(t, full)
		lr.replay = true
		h := newHost(t)
		link(h, lr.h)
		c := newChecker(h, oneLayerRef(t, full, cid, 4))
		c.CheckLayers = 1 // only the first layer: the anchor alone catches it
		claim := swarm.Claim{Model: cid, Start: start, End: 4}
		if _, err := c.Check(t.Context(), lr.h.ID(), claim); err != nil {
			t.Fatalf("first (honest) answer: %v", err)
		}
		_, err := c.Check(t.Context(), lr.h.ID(), claim)
		var fe *FailError
		if !errors.As(err, &fe) || fe.Layer != start {
			t.Fatalf("replayed trace: %v, want a failure at layer %d", err, start)
		}
	}
}

// TestEveryLayerCheckable: with only one-layer slices and CheckLayers
// covering the range, every layer is recomputed from the trace, layer 0
// (embedding) and the last (head, logits) included; a peer wrong only in
// the logits, or only in a middle layer, is caught.
func TestEveryLayerCheckable(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	const n = 4
	ref := oneLayerRef(t, full, cid, n)
	for _, bad := range []int{-1, n - 1, 2} {
		lr := newLiar(t, full)
		if bad >= 0 {
			lr.tamper = func(_ *Request, l int, out []float32) []float32 {
				if l == bad {
					out[1] += 0.5 * (1 + float32(math.Abs(float64(out[1]))))
				}
				return out
			}
		}
		h := newHost(t)
		link(h, lr.h)
		c := newChecker(h, ref)
		c.CheckLayers = n
		rep, err := c.Check(t.Context(), lr.h.ID(), swarm.Claim{Model: cid, Start: 0, End: n})
		if !slices.Equal(rep.Checked, []int{0, 1, 2, 3}) {
			t.Fatalf("checked %v, want every layer", rep.Checked)
		}
		var fe *FailError
		switch {
		case bad < 0 && err != nil:
			t.Fatalf("honest: %v", err)
		case bad >= 0 && (!errors.As(err, &fe) || fe.Layer != bad):
			t.Fatalf("wrong at layer %d: %v", bad, err)
		}
	}
}

// TestWholeModelClaim: a role's claim (the whole model, its layer count
// unannounced) is resolved from the reference and, once passed, covers
// every range of the model.
func TestWholeModelClaim(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	ph, _, _ := servingPeer(t, full, cid)
	h := newHost(t)
	link(h, ph)
	c := newChecker(h, oneLayerRef(t, full, cid, 4))
	rep, err := c.Check(t.Context(), ph.ID(), swarm.RoleClaim(cid))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Claim.End != 4 || len(rep.Checked) != 2 || rep.Checked[0] != 0 {
		t.Fatalf("report %+v", rep)
	}
	if !c.Trust.Verified(ph.ID(), swarm.RoleClaim(cid)) || !c.Trust.Verified(ph.ID(), swarm.Claim{Model: cid, Start: 1, End: 3}) {
		t.Fatal("a passed whole-model claim does not cover the model")
	}
}
