package moa

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/internal/engine"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// golden compares lines with testdata/file, or rewrites the file with -update.
func golden(t *testing.T, file string, lines []string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	got := strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i := range max(len(want), len(lines)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(lines) {
			g = lines[i]
		}
		if w != g {
			t.Errorf("%s line %d:\n got %s\nwant %s", path, i+1, g, w)
		}
	}
}

// goldenHex is b in hex, or for a long b its start, length and digest.
func goldenHex(b []byte) string {
	if len(b) <= 1024 {
		return hex.EncodeToString(b)
	}
	return fmt.Sprintf("%x... %d bytes sha256 %x", b[:32], len(b), sha256.Sum256(b))
}

// errClass names what callers can tell about a read's error.
func errClass(err error) string {
	if err == nil {
		return "ok"
	}
	var c []string
	for _, k := range []struct {
		name string
		err  error
	}{{"protocol", ErrProtocol}, {"nomem", ErrNoMemory}, {"unexpected-eof", io.ErrUnexpectedEOF}, {"eof", io.EOF}} {
		if errors.Is(err, k.err) {
			c = append(c, k.name)
		}
	}
	if len(c) == 0 {
		return "other"
	}
	return strings.Join(c, ",")
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
		var b bytes.Buffer
		if err := writeFrame(&b, f.v); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		all.Write(b.Bytes())
		lines = append(lines, "write "+f.name+" "+goldenHex(b.Bytes()))
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
	golden(t, "frames.golden", lines)
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
