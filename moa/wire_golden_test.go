package moa

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/wire/wiretest"
)

// errClass names what callers can tell about a read's error.
func errClass(err error) string {
	return wiretest.ErrClass(err, wiretest.Sentinel{Name: "protocol", Err: ErrProtocol}, wiretest.Sentinel{Name: "nomem", Err: ErrNoMemory})
}

// stingyBudget refuses reservations above limit bytes and records each.
type stingyBudget struct {
	limit, held int
	log         []string
}

func (b *stingyBudget) ReserveMemory(size int, prio uint8) error {
	b.log = append(b.log, fmt.Sprintf("reserve %d@%d", size, prio))
	if b.held+size > b.limit {
		return errors.New("over budget")
	}
	b.held += size
	return nil
}

func (b *stingyBudget) ReleaseMemory(size int) {
	b.log = append(b.log, fmt.Sprintf("release %d", size))
	b.held -= size
}

// TestFrameGolden pins the bytes of every kind of MoA and draft frame, and
// what a reader makes of malformed ones, so that the framing code can
// change without a peer of another version noticing.
func TestFrameGolden(t *testing.T) {
	yes := true
	frames := []struct {
		name string
		v    any
	}{
		{"request", &Request{Role: Critic, Messages: []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "why?"}},
			Sampling:  engine.Sampling{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, Seed: 42},
			MaxTokens: 5, DeadlineMS: 100, Think: &yes}},
		{"request-greedy", &Request{Role: Writer, Messages: []Message{{Role: "user", Content: "héllo \"x\" <b>"}}}},
		{"reply-token", &Reply{Type: ReplyToken, Text: "a"}},
		{"reply-token-reasoning", &Reply{Type: ReplyToken, Reasoning: "b"}},
		{"reply-done", &Reply{Type: ReplyDone, Done: &Done{Role: Critic, Model: "m", ModelCID: "bafy", PromptTokens: 3, Tokens: 1,
			TokPerSec: 12.5, TTFTMS: 3.25, TotalMS: 80, Reason: "stop", Thermal: "nominal", Battery: 80, Drafted: 4, DraftAccepted: 3, DraftRounds: 2, DraftError: "x"}}},
		{"reply-error", &Reply{Type: ReplyError, Error: &WireError{Code: CodeTooLong, Message: "too long", PromptTokens: 9000, Context: 4096}}},
		{"draft-open", &DraftOpen{Vocab: "abc", RepeatPenalty: 1.1}},
		{"draft-step", &DraftStep{Keep: 3, Tokens: []int32{1, -2, 3}, N: 4}},
		{"draft-reply", &DraftReply{Vocab: "abc", VocabSize: 100, Context: 4096}},
		{"draft-reply-tokens", &DraftReply{Tokens: []int32{7, 8}}},
		{"big", &Reply{Type: ReplyToken, Text: strings.Repeat("x", 200<<10)}},
	}
	var lines []string
	var all bytes.Buffer
	for _, f := range frames {
		b := wiretest.WriteFrame(t, &all, f.name, func(w io.Writer) error { return writeFrame(w, f.v) })
		lines = append(lines, "write "+f.name+" "+wiretest.Hex(b))
	}
	err := writeFrame(io.Discard, &Reply{Type: ReplyToken, Text: strings.Repeat("x", maxFrame)})
	lines = append(lines, "write oversize "+errClass(err))

	// Every frame written reads back as the value written.
	r := bufio.NewReader(&all)
	for _, f := range frames {
		got := newOf(f.v)
		err := readFrame(r, got, nil, network.ReservationPriorityMedium)
		var again bytes.Buffer
		if err == nil {
			writeFrame(&again, got)
		}
		var want bytes.Buffer
		writeFrame(&want, f.v)
		lines = append(lines, fmt.Sprintf("read %s %s same=%v", f.name, errClass(err), bytes.Equal(again.Bytes(), want.Bytes())))
	}

	frame := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	reads := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"zero-length", []byte{0}},
		{"length-only", []byte{5}},
		{"prefix-cut", []byte{0x80}},
		{"prefix-overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"prefix-11-bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
		{"oversize", []byte{0x81, 0x80, 0x40}},
		{"max-size-cut", []byte{0x80, 0x80, 0x40, '{'}},
		{"truncated", []byte{10, '{'}},
		{"non-minimal-prefix", append([]byte{0x90, 0x00}, `{"type":"token"}`...)},
		{"not-json", frame("hello")},
		{"unknown-field", frame(`{"type":"token","x":1}`)},
		{"trailing-object", frame(`{"type":"token"}{}`)},
		{"trailing-brace", frame(`{"type":"token"}}`)},
		{"trailing-space", frame(`{"type":"token"} `)},
		{"array", frame(`[]`)},
		{"null", frame(`null`)},
	}
	for _, rd := range reads {
		var rep Reply
		err := readFrame(bufio.NewReader(bytes.NewReader(rd.in)), &rep, nil, network.ReservationPriorityHigh)
		lines = append(lines, fmt.Sprintf("read %s %s", rd.name, errClass(err)))
	}

	// What a budget is asked for, and refusals.
	for _, tc := range []struct {
		name  string
		size  int
		limit int
		prio  uint8
	}{
		{"small", 100, 1 << 30, network.ReservationPriorityMedium},
		{"at-small-frame", smallFrame, 1 << 30, network.ReservationPriorityLow},
		{"large", 300 << 10, 1 << 30, network.ReservationPriorityMedium},
		{"large-refused", 300 << 10, 300 << 10, network.ReservationPriorityMedium},
		{"small-refused", 100, 10, network.ReservationPriorityMedium},
	} {
		var b bytes.Buffer
		writeFrame(&b, &Reply{Type: ReplyToken, Text: strings.Repeat("y", tc.size-len(`{"type":"token","text":""}`))})
		bud := &stingyBudget{limit: tc.limit}
		var rep Reply
		err := readFrame(bufio.NewReader(&b), &rep, bud, tc.prio)
		lines = append(lines, fmt.Sprintf("budget %s %s %s held=%d", tc.name, errClass(err), strings.Join(bud.log, " "), bud.held))
	}
	// A frame cut short holds what it reserved until it fails, then nothing.
	var b bytes.Buffer
	writeFrame(&b, &Reply{Type: ReplyToken, Text: strings.Repeat("z", 300<<10)})
	bud := &stingyBudget{limit: 1 << 30}
	var rep Reply
	err = readFrame(bufio.NewReader(bytes.NewReader(b.Bytes()[:100<<10])), &rep, bud, network.ReservationPriorityMedium)
	lines = append(lines, fmt.Sprintf("budget cut %s %s held=%d", errClass(err), strings.Join(bud.log, " "), bud.held))
	wiretest.Golden(t, "testdata/frames.golden", lines)
}

// newOf is a new zero value of v's pointed-to type.
func newOf(v any) any {
	switch v.(type) {
	case *Request:
		return new(Request)
	case *Reply:
		return new(Reply)
	case *DraftOpen:
		return new(DraftOpen)
	case *DraftStep:
		return new(DraftStep)
	case *DraftReply:
		return new(DraftReply)
	}
	panic(fmt.Sprintf("newOf %T", v))
}
