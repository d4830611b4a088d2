package pipeline

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/wire/wiretest"
)

// errClass names what callers can tell about a read's error.
func errClass(err error) string {
	return wiretest.ErrClass(err, wiretest.Sentinel{Name: "bad", Err: ErrBadFrame})
}

// TestFrameGolden pins the bytes of every kind of stage frame, and what a
// reader makes of malformed ones, so that the framing code can change
// without a stage of another version noticing.
func TestFrameGolden(t *testing.T) {
	open := &Open{Session: 7, Model: "bafyroot", Layers: 4, Hidden: 2, DType: DTypeF16,
		Route:    []RouteHop{{Peer: "p1", Addrs: []string{"/ip4/1.2.3.4/tcp/5"}, Start: 0, End: 2}, {Peer: "p2", Start: 2, End: 4}},
		Sampling: engine.Sampling{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, Seed: 42},
		Logits:   true, From: 1, Until: 3, Verify: true}
	hidden := make([]byte, 3*2*2)
	for i := range hidden {
		hidden[i] = byte(i * 7)
	}
	type frame struct {
		name string
		typ  byte
		body []byte
		json any
	}
	step := func(s *Step) (byte, []byte) { return encodeStepFrame(s) }
	var frames []frame
	add := func(name string, typ byte, body []byte) {
		frames = append(frames, frame{name: name, typ: typ, body: body})
	}
	frames = append(frames,
		frame{name: "open", typ: frameOpen, json: open},
		frame{name: "open-plain", typ: frameOpen, json: &Open{Session: 1, Model: "m", Layers: 1, Hidden: 1, Route: []RouteHop{{Peer: "p", End: 1}}, DType: DTypeF32}},
		frame{name: "open-parts", typ: frameOpen, json: &Open{Session: 2, Model: "m", Layers: 2, Hidden: 1, Route: []RouteHop{{Peer: "p", End: 1}, {Peer: "q", Start: 1, End: 2}}, DType: DTypeF32, Parts: true}},
		frame{name: "opened", typ: frameOpened, json: &Opened{Session: 7, Vocab: 151936}},
		frame{name: "error", typ: frameError, json: &WireError{Code: CodeDownstream, Message: "gone <x>", Peer: "p2", Start: 2, End: 4}},
	)
	typ, body := step(&Step{Session: 7, Pos: 3, Tokens: []int32{1, -2, 3}})
	add("step-tokens", typ, body)
	typ, body = step(&Step{Session: 7, Pos: 3, Tokens: []int32{1, 2, 3}, DType: dtF16, Hidden: hidden})
	add("step-hidden", typ, body)
	typ, body = step(&Step{Session: 7, Pos: 3, Tokens: []int32{1, 2, 3}, DType: dtF16, Hidden: hidden, Part: true})
	add("part-hidden", typ, body)
	typ, body = step(&Step{Session: 7, Pos: 0, Tokens: []int32{1, 2, 3}, Batches: []int{2, 1}})
	add("replay", typ, body)
	typ, body = step(&Step{Session: 7, Pos: 9, Tokens: []int32{4, 5, 6}, Verify: true})
	add("verify-greedy", typ, body)
	typ, body = step(&Step{Session: 7, Pos: 9, Tokens: []int32{4, 5, 6}, Verify: true,
		Drafts: []engine.Dist{{IDs: []int32{5, 9}, P: []float32{0.75, 0.25}}, {IDs: []int32{6}, P: []float32{1}}}})
	add("verify-drafts", typ, body)
	add("result", frameResult, encodeResult(&Result{Session: 7, Token: 11, Hops: []HopTiming{{1.5, 2.25}, {3, 0}}}))
	add("result-logits", frameResult, encodeResult(&Result{Session: 7, Token: -1, Logits: []float32{0.5, -1, 2}}))
	add("result-tokens", frameResult, encodeResult(&Result{Session: 7, Token: 6, Tokens: []int32{5, 6}, Hops: []HopTiming{{1, 1}}}))
	add("empty-body", frameStep, nil)
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i * 13)
	}
	add("big", frameStep, big)

	var lines []string
	var all bytes.Buffer
	for _, f := range frames {
		b := wiretest.WriteFrame(t, &all, f.name, func(w io.Writer) error {
			if f.json != nil {
				return writeJSON(w, f.typ, f.json)
			}
			return writeFrame(w, f.typ, f.body)
		})
		lines = append(lines, "write "+f.name+" "+wiretest.Hex(b))
	}
	r := bufio.NewReader(&all)
	for _, f := range frames {
		typ, body, err := readFrame(r, maxFrame)
		same := typ == f.typ
		if f.json != nil {
			v := map[string]any{}
			same = same && decodeJSON(body, &v) == nil
		} else {
			same = same && bytes.Equal(body, f.body)
		}
		lines = append(lines, fmt.Sprintf("read %s %s same=%v", f.name, errClass(err), same))
	}
	if _, _, err := readFrame(r, maxFrame); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}

	uv := wiretest.Uvarint
	reads := []struct {
		name  string
		in    []byte
		limit uint64
	}{
		{"empty", nil, maxFrame},
		{"zero-length", []byte{0}, maxFrame},
		{"length-only", []byte{5}, maxFrame},
		{"type-only", []byte{5, frameStep}, maxFrame},
		{"one-length-no-type", []byte{1}, maxFrame},
		{"one-length-step", []byte{1, frameStep}, maxFrame},
		{"prefix-cut", []byte{0x80}, maxFrame},
		{"prefix-overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, maxFrame},
		{"prefix-11-bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, maxFrame},
		{"over-max", uv(maxFrame+1, frameStep), maxFrame + 10},
		{"at-max-cut", uv(maxFrame, frameStep, 0), maxFrame},
		{"over-limit", uv(limitJSON+1, frameOpen), limitJSON},
		{"at-limit-cut", uv(limitJSON, frameOpen, '{'), limitJSON},
		{"json-over-type-limit", uv(maxJSONFrame+2, frameOpened), maxFrame},
		{"error-over-type-limit", uv(maxJSONFrame+2, frameError), maxFrame},
		{"step-over-json-limit", uv(maxJSONFrame+2, frameStep), maxFrame},
		{"type-0", uv(2, 0, 0), maxFrame},
		{"type-9", uv(2, 9, 0), maxFrame},
		{"type-255", uv(2, 255, 0), maxFrame},
		{"truncated", uv(10, frameResult, 1, 2), maxFrame},
		{"non-minimal-prefix", []byte{0x83, 0x00, frameStep, 1, 2}, maxFrame},
		{"limit-0", uv(2, frameStep, 0), 0},
		{"limit-1", uv(2, frameStep, 0), 1},
		{"limit-2", uv(2, frameStep, 0), 2},
		{"limit-step", uv(limitStep(8, 0)+1, frameStep), limitStep(8, 0)},
		{"limit-result", uv(limitResult+1, frameResult), limitResult},
	}
	for _, rd := range reads {
		typ, body, err := readFrame(bufio.NewReader(bytes.NewReader(rd.in)), rd.limit)
		lines = append(lines, fmt.Sprintf("read %s %s type=%d body=%x", rd.name, errClass(err), typ, body))
	}
	for _, s := range []string{`{"session":1}`, `{"session":1,"x":2}`, `{"session":1}{}`, `{"session":1}}`, `{"session":1} `, `[]`, `null`, ``, `{`} {
		var o Opened
		lines = append(lines, fmt.Sprintf("json %q %s", s, errClass(decodeJSON([]byte(s), &o))))
	}
	wiretest.Golden(t, "testdata/frames.golden", lines)
}
