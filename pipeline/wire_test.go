package pipeline

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
)

func TestStepResultRoundTrip(t *testing.T) {
	st := &Step{Session: 9, Pos: 3, Tokens: []int32{5, 6}, DType: dtF16, Hidden: make([]byte, 2*2*8)}
	got, err := DecodeStep(encodeStep(st), 8)
	if err != nil || got.Session != 9 || got.Pos != 3 || len(got.Tokens) != 2 || len(got.Hidden) != 32 {
		t.Fatalf("step: %+v, %v", got, err)
	}
	if _, err := DecodeStep(encodeStep(st), 9); err == nil {
		t.Fatal("hidden size mismatch accepted")
	}
	r := &Result{Session: 9, Token: 42, Logits: []float32{1, 2}, Hops: []HopTiming{{1, 2}, {3, 0}}}
	gr, err := DecodeResult(encodeResult(r))
	if err != nil || gr.Token != 42 || len(gr.Logits) != 2 || len(gr.Hops) != 2 || gr.Hops[1].ComputeMS != 3 {
		t.Fatalf("result: %+v, %v", gr, err)
	}
}

// A verify step travels as its own frame type, and its result carries a
// token per position; trailing bytes that are no such list are refused.
func TestVerifyRoundTrip(t *testing.T) {
	typ, body := encodeStepFrame(&Step{Session: 9, Pos: 3, Tokens: []int32{5, 6, 7}, Verify: true})
	if typ != frameVerify {
		t.Fatalf("verify step sent as frame type %d", typ)
	}
	got, err := DecodeStepFrame(typ, body, 8)
	if err != nil || !got.Verify || got.Pos != 3 || len(got.Tokens) != 3 {
		t.Fatalf("verify step: %+v, %v", got, err)
	}
	if plain, _ := DecodeStepFrame(frameStep, body, 8); plain == nil || plain.Verify {
		t.Fatalf("the same body as a plain step: %+v", plain)
	}
	r := &Result{Session: 9, Token: 7, Tokens: []int32{1, 2, 7}, Hops: []HopTiming{{1, 2}}}
	b := encodeResult(r)
	gr, err := DecodeResult(b)
	if err != nil || len(gr.Tokens) != 3 || gr.Tokens[2] != 7 || gr.Hops[0].DownstreamMS != 2 {
		t.Fatalf("verify result: %+v, %v", gr, err)
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(b[:len(b):len(b)], 0), b[:len(b)-12]} {
		if _, err := DecodeResult(bad); err == nil {
			t.Fatalf("a result with %d bytes of tokens after its hops was accepted", len(bad)-len(b)+16)
		}
	}
	if gr, err := DecodeResult(encodeResult(&Result{Session: 9, Token: 7})); err != nil || gr.Tokens != nil {
		t.Fatalf("plain result: %+v, %v", gr, err)
	}
}

// A sampling verify step carries the draft's distributions after its
// hidden states; malformed ones are refused at decoding, and ones that do
// not fit the session (a greedy one, ids outside the vocabulary, a draft
// token they do not hold, sums far from 1) by checkDrafts.
func TestVerifyDraftsRoundTrip(t *testing.T) {
	ds := []engine.Dist{{IDs: []int32{6, 9}, P: []float32{0.75, 0.25}}, {IDs: []int32{7}, P: []float32{1}}}
	st := &Step{Session: 9, Pos: 3, Tokens: []int32{5, 6, 7}, DType: dtF16, Hidden: make([]byte, 3*2*8), Verify: true, Drafts: ds}
	typ, body := encodeStepFrame(st)
	got, err := DecodeStepFrame(typ, body, 8)
	if err != nil || len(got.Drafts) != 2 || got.Drafts[0].IDs[1] != 9 || got.Drafts[0].P[0] != 0.75 || len(got.Hidden) != 48 {
		t.Fatalf("verify step with drafts: %+v, %v", got, err)
	}
	sampling := &Open{Sampling: engine.Sampling{Temperature: 0.8}}
	if err := checkDrafts(got, sampling, 16); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeStepFrame(frameStep, body, 8); err == nil {
		t.Fatal("a plain step with bytes after its hidden states was accepted")
	}
	for _, bad := range [][]byte{body[:len(body)-1], append(body[:len(body):len(body)], 0), body[:len(body)-3]} {
		if _, err := DecodeStepFrame(frameVerify, bad, 8); err == nil {
			t.Fatalf("a verify step with %d bytes of distributions was accepted", len(bad)-len(body))
		}
	}
	one := *st
	one.Drafts = ds[:1] // one distribution for two draft tokens
	if typ, body := encodeStepFrame(&one); func() bool { _, err := DecodeStepFrame(typ, body, 8); return err == nil }() {
		t.Fatal("one distribution for two draft tokens was accepted")
	}
	for name, c := range map[string]struct {
		open  *Open
		vocab int
		d     engine.Dist
	}{
		"greedy session": {&Open{}, 16, ds[0]},
		"outside vocab":  {sampling, 8, ds[0]},
		"without token":  {sampling, 16, engine.Dist{IDs: []int32{9}, P: []float32{1}}},
		"sum":            {sampling, 16, engine.Dist{IDs: []int32{6, 9}, P: []float32{0.5, 0.2}}},
		"nan":            {sampling, 16, engine.Dist{IDs: []int32{6, 9}, P: []float32{float32(math.NaN()), 1}}},
		"twice":          {sampling, 16, engine.Dist{IDs: []int32{6, 6}, P: []float32{0.5, 0.5}}},
	} {
		s := *got
		s.Drafts = []engine.Dist{c.d, ds[1]}
		if err := checkDrafts(&s, c.open, c.vocab); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecodeStep(f *testing.F) {
	f.Add(encodeStep(&Step{Session: 1, Tokens: []int32{1}, DType: dtF16, Hidden: make([]byte, 16)}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeStep(b, 8)
		if err != nil {
			return
		}
		per := map[byte]int{dtNone: 0, dtF16: 2, dtF32: 4}[s.DType]
		if len(s.Hidden) != len(s.Tokens)*8*per {
			t.Fatalf("accepted a step with %d hidden bytes for %d tokens", len(s.Hidden), len(s.Tokens))
		}
	})
}

func FuzzDecodeReplay(f *testing.F) {
	_, b := encodeStepFrame(&Step{Session: 1, Tokens: []int32{1, 2, 3}, DType: dtF32, Hidden: make([]byte, 96), Batches: []int{2, 1}})
	f.Add(b)
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeStepFrame(frameReplay, b, 8)
		if err != nil {
			return
		}
		sum := 0
		for _, n := range s.Batches {
			if n <= 0 {
				t.Fatalf("accepted a batch of %d tokens", n)
			}
			sum += n
		}
		if sum != len(s.Tokens) {
			t.Fatalf("accepted batches of %d tokens for a step of %d", sum, len(s.Tokens))
		}
	})
}

func TestReplayFrameRoundTrip(t *testing.T) {
	in := &Step{Session: 9, Pos: 4, Tokens: []int32{5, 6, 7}, DType: dtNone, Batches: []int{1, 2}}
	typ, b := encodeStepFrame(in)
	if typ != frameReplay {
		t.Fatalf("frame type %d", typ)
	}
	out, err := DecodeStepFrame(typ, b, 8)
	if err != nil {
		t.Fatal(err)
	}
	if out.Session != 9 || out.Pos != 4 || len(out.Tokens) != 3 || len(out.Batches) != 2 || out.Batches[1] != 2 {
		t.Fatalf("round trip: %+v", out)
	}
	bad := append([]byte{}, b...)
	bad[4] = 3 // batches 3+2 for 3 tokens
	if _, err := DecodeStepFrame(typ, bad, 8); err == nil {
		t.Fatal("accepted batches that do not add up to the step")
	}
}

func FuzzDecodeResult(f *testing.F) {
	f.Add(encodeResult(&Result{Session: 1, Token: 2, Hops: []HopTiming{{1, 1}}}))
	f.Fuzz(func(t *testing.T, b []byte) { DecodeResult(b) })
}

func FuzzReadFrame(f *testing.F) {
	var b bytes.Buffer
	writeJSON(&b, frameOpen, &Open{Session: 1})
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for i := 0; i < 3; i++ {
			typ, body, err := readFrame(r, limitStep(8, 0))
			if err != nil {
				return
			}
			if typ == frameOpen {
				var o Open
				if decodeJSON(body, &o) == nil {
					o.validate()
				}
			}
		}
	})
}

func TestReadFrameLimits(t *testing.T) {
	var b bytes.Buffer
	// A peer declares a 200 MiB step and sends 6 bytes: refused by limit, or
	// (within the limit) failing as truncated without allocating 200 MiB.
	b.Write([]byte{0x80, 0x80, 0x80, 0x64, frameStep, 0})
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(b.Bytes())), limitJSON); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("oversize for the limit: %v", err)
	}
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(b.Bytes())), maxFrame); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated big frame: %v", err)
	}
}
