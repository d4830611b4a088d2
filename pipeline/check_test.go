package pipeline

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// TestOpenProbeValidate: a probe's route chains from From to Until; an
// ordinary open carries neither (and an old stage, decoding strictly,
// would refuse them as unknown fields).
func TestOpenProbeValidate(t *testing.T) {
	hop := func(a, b int) RouteHop { return RouteHop{Peer: "p", Start: a, End: b} }
	cases := []struct {
		name string
		o    Open
		ok   bool
	}{
		{"whole", Open{Layers: 8, Route: []RouteHop{hop(0, 4), hop(4, 8)}}, true},
		{"probe of the middle", Open{Layers: 8, From: 2, Until: 6, Route: []RouteHop{hop(2, 6)}}, true},
		{"probe to the head", Open{Layers: 8, From: 6, Route: []RouteHop{hop(6, 8)}}, true},
		{"probe from 0", Open{Layers: 8, Until: 3, Route: []RouteHop{hop(0, 3)}}, true},
		{"route past until", Open{Layers: 8, Until: 4, Route: []RouteHop{hop(0, 6)}}, false},
		{"route short of until", Open{Layers: 8, Until: 6, Route: []RouteHop{hop(0, 4)}}, false},
		{"route before from", Open{Layers: 8, From: 2, Route: []RouteHop{hop(0, 8)}}, false},
		{"from past until", Open{Layers: 8, From: 6, Until: 4, Route: []RouteHop{hop(6, 8)}}, false},
		{"until past the layers", Open{Layers: 8, Until: 9, Route: []RouteHop{hop(0, 9)}}, false},
		{"negative from", Open{Layers: 8, From: -1, Route: []RouteHop{hop(-1, 8)}}, false},
		{"verify, greedy", Open{Layers: 8, Verify: true, Sampling: engine.Sampling{RepeatPenalty: 1.5}, Route: []RouteHop{hop(0, 8)}}, true},
		{"verify, sampling", Open{Layers: 8, Verify: true, Sampling: engine.Sampling{Temperature: 0.7}, Route: []RouteHop{hop(0, 8)}}, true},
		{"verify, logits", Open{Layers: 8, Verify: true, Logits: true, Route: []RouteHop{hop(0, 8)}}, false},
		{"verify, probe", Open{Layers: 8, Verify: true, Until: 4, Route: []RouteHop{hop(0, 4)}}, false},
	}
	for _, tc := range cases {
		tc.o.Session, tc.o.Hidden, tc.o.DType = 1, 64, DTypeF32
		if err := tc.o.validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	b, _ := json.Marshal(&Open{Session: 1, Layers: 8, Hidden: 64, DType: DTypeF32, Route: []RouteHop{hop(0, 8)}})
	if strings.Contains(string(b), "from") || strings.Contains(string(b), "until") || strings.Contains(string(b), "verify") {
		t.Fatalf("an ordinary open carries probe or verify fields: %s", b)
	}
}

// TestMayName: a hop passes back an error frame only when it names the
// next hop or one after it, or, for bad input, the hop itself.
func TestMayName(t *testing.T) {
	o := Open{Route: []RouteHop{{Peer: "a", End: 2}, {Peer: "b", Start: 2, End: 4}, {Peer: "c", Start: 4, End: 8}}}
	we := func(code, p string, a, b int) *WireError { return &WireError{Code: code, Peer: p, Start: a, End: b} }
	cases := []struct {
		index int
		we    *WireError
		ok    bool
	}{
		{0, we(CodeDownstream, "b", 2, 4), true},
		{0, we(CodeBusy, "c", 4, 8), true},
		{0, we(CodeBadInput, "a", 0, 2), true}, // b refused a's output
		{1, we(CodeBadInput, "b", 2, 4), true},
		{1, we(CodeDownstream, "a", 0, 2), false}, // c blames a hop before it
		{1, we(CodeBadInput, "a", 0, 2), false},   // c cannot have seen a's output
		{0, we(CodeDownstream, "a", 0, 2), false}, // b blames a
		{0, we(CodeDownstream, "x", 2, 4), false}, // not on the route
		{0, we(CodeDownstream, "b", 0, 4), false}, // b, but other layers
	}
	for i, tc := range cases {
		if got := o.mayName(tc.index, tc.we); got != tc.ok {
			t.Errorf("case %d: hop %d passing back %+v: %v, want %v", i, tc.index, tc.we, got, tc.ok)
		}
	}
}

func TestCheckResult(t *testing.T) {
	tokenOpen, logitOpen := &Open{Layers: 8, Hidden: 4}, &Open{Layers: 8, Hidden: 4, Logits: true}
	probe := &Open{Layers: 8, Hidden: 4, Until: 6}
	nan := float32(math.NaN())
	cases := []struct {
		name string
		r    Result
		o    *Open
		n    int
		ok   bool
	}{
		{"token", Result{Session: 1, Token: 9}, tokenOpen, 1, true},
		{"token past the vocabulary", Result{Session: 1, Token: 10}, tokenOpen, 1, false},
		{"negative token", Result{Session: 1, Token: -1}, tokenOpen, 1, false},
		{"logits for a token", Result{Session: 1, Logits: make([]float32, 10)}, tokenOpen, 1, false},
		{"other session", Result{Session: 2}, tokenOpen, 1, false},
		{"logits", Result{Session: 1, Logits: make([]float32, 10)}, logitOpen, 1, true},
		{"short logits", Result{Session: 1, Logits: make([]float32, 9)}, logitOpen, 1, false},
		{"NaN logit", Result{Session: 1, Logits: []float32{0, 0, nan, 0, 0, 0, 0, 0, 0, 0}}, logitOpen, 1, false},
		{"huge logit", Result{Session: 1, Logits: []float32{0, 0, 2e6, 0, 0, 0, 0, 0, 0, 0}}, logitOpen, 1, false},
		{"probe", Result{Session: 1, Logits: make([]float32, 8)}, probe, 2, true},
		{"probe of other positions", Result{Session: 1, Logits: make([]float32, 4)}, probe, 2, false},
		{"probe with an infinity", Result{Session: 1, Logits: []float32{0, float32(math.Inf(-1)), 0, 0}}, probe, 1, false},
	}
	for _, tc := range cases {
		err := checkResult(&tc.r, tc.o, 10, 1, tc.n, false)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// A verify step's result: a token for each position, the last also as Token.
	verify := []struct {
		name   string
		r      Result
		n      int
		verify bool
		ok     bool
	}{
		{"verify", Result{Session: 1, Token: 4, Tokens: []int32{9, 0, 4}}, 3, true, true},
		{"verify, one token short", Result{Session: 1, Token: 4, Tokens: []int32{0, 4}}, 3, true, false},
		{"verify, token past the vocabulary", Result{Session: 1, Token: 4, Tokens: []int32{10, 0, 4}}, 3, true, false},
		{"verify, Token not the last", Result{Session: 1, Token: 9, Tokens: []int32{9, 0, 4}}, 3, true, false},
		{"verify, with logits", Result{Session: 1, Token: 4, Tokens: []int32{9, 0, 4}, Logits: make([]float32, 10)}, 3, true, false},
		{"verify answered with one token", Result{Session: 1, Token: 4}, 3, true, false},
		{"tokens for a plain step", Result{Session: 1, Token: 4, Tokens: []int32{4}}, 1, false, false},
	}
	for _, tc := range verify {
		err := checkResult(&tc.r, tokenOpen, 10, 1, tc.n, tc.verify)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestAgree(t *testing.T) {
	a := []float32{100, 1, 2, 3}
	if ok, d := agree(a, []float32{100.05, 1, 2, 3}, 0, 1e-3); !ok || d > 1e-3 {
		t.Fatalf("a difference of 5e-4 of the largest value: %v %g", ok, d)
	}
	if ok, _ := agree(a, []float32{100, 1.2, 2, 3}, 0, 1e-3); ok {
		t.Fatal("a difference of 2e-3 of the largest value agreed")
	}
	// Rows are compared each against its own scale: a large row does not
	// hide a lie in a small one.
	if ok, _ := agree([]float32{1000, 0, 0.5, 0.5}, []float32{1000, 0, 0.5, 0.9}, 2, 1e-3); ok {
		t.Fatal("a lie in the second row hid behind the first row's scale")
	}
	if ok, _ := agree(a, a[:3], 0, 1); ok {
		t.Fatal("results of different lengths agreed")
	}
}

// TestStageRefusesBadNumbers: a stage refuses a step whose hidden states
// hold NaN or absurd values with bad_input naming the hop before it, and
// the session stays usable.
func TestStageRefusesBadNumbers(t *testing.T) {
	const arch = "qwen3"
	_, cid := model(t, arch)
	origin, st := newStagePeer(t), newStagePeer(t)
	st.serve(t, arch, 2, 4)
	origin.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Hour)
	open := Open{Session: 7, Model: cid, Layers: 4, Hidden: 64, DType: DTypeF32, Index: 1,
		Route: []RouteHop{{Peer: origin.h.ID().String(), Start: 0, End: 2}, {Peer: st.h.ID().String(), Start: 2, End: 4}}}
	s, err := origin.h.NewStream(t.Context(), st.h.ID(), ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	r := newReader(s)
	if err := writeJSON(s, frameOpen, &open); err != nil {
		t.Fatal(err)
	}
	if typ, _, err := readFrame(r, limitJSON); err != nil || typ != frameOpened {
		t.Fatalf("open: %d %v", typ, err)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), -2e6} {
		h := make([]float32, 64)
		h[5] = bad
		if err := writeFrame(s, frameStep, encodeStep(&Step{Session: 7, Tokens: []int32{1}, DType: dtF32, Hidden: f32Bytes(h)})); err != nil {
			t.Fatal(err)
		}
		typ, body, err := readFrame(r, limitJSON)
		if err != nil || typ != frameError {
			t.Fatalf("%g: %d %v", bad, typ, err)
		}
		var we WireError
		if err := decodeJSON(body, &we); err != nil || we.Code != CodeBadInput || we.Peer != origin.h.ID().String() || we.End != 2 {
			t.Fatalf("%g: %s, want bad_input naming the hop before", bad, body)
		}
	}
	if err := writeFrame(s, frameStep, encodeStep(&Step{Session: 7, Tokens: []int32{1}, DType: dtF32, Hidden: f32Bytes(make([]float32, 64))})); err != nil {
		t.Fatal(err)
	}
	typ, body, err := readFrame(r, limitResult)
	if err != nil || typ != frameResult {
		t.Fatalf("a good step after bad ones: %d %s %v", typ, body, err)
	}
	res, err := DecodeResult(body)
	if err != nil || checkResult(res, &open, 0, 7, 1, false) != nil {
		t.Fatalf("result %+v: %v", res, err)
	}
	if !errors.Is(checkNumbers([]float32{1, float32(math.NaN())}), ErrBadNumbers) {
		t.Fatal("checkNumbers does not wrap ErrBadNumbers")
	}
}

// FuzzDecodeOpen: an open frame decodes and validates, or is refused,
// never a panic; what validates has a route a stage can index.
func FuzzDecodeOpen(f *testing.F) {
	f.Add([]byte(`{"session":1,"model":"m","layers":8,"hidden":64,"route":[{"peer":"p","start":2,"end":6}],"index":0,"dtype":"f32","sampling":{},"from":2,"until":6}`))
	f.Add([]byte(`{"session":1,"model":"m","layers":8,"hidden":64,"route":[{"peer":"p","start":0,"end":8}],"index":0,"dtype":"f16","sampling":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var o Open
		if decodeJSON(b, &o) != nil || o.validate() != nil {
			return
		}
		hop := o.Route[o.Index]
		if hop.Start < o.From || hop.End > o.end() || o.end() > o.Layers {
			t.Fatalf("validated open with hop [%d,%d) outside [%d,%d) of %d", hop.Start, hop.End, o.From, o.end(), o.Layers)
		}
	})
}
