package verify

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/internal/wire/wiretest"
)

// errClass names what callers can tell about a read's error.
func errClass(err error) string {
	return wiretest.ErrClass(err, wiretest.Sentinel{Name: "bad", Err: ErrBadFrame})
}

// TestFrameGolden pins the bytes of every kind of challenge frame, and
// what a reader makes of malformed ones, so that the framing code can
// change without a peer of another version noticing.
func TestFrameGolden(t *testing.T) {
	big := make([]float32, 70000)
	for i := range big {
		big[i] = float32(i) / 3
	}
	writes := []struct {
		name  string
		write func(w io.Writer) error
	}{
		{"request-tokens", func(w io.Writer) error {
			return WriteRequest(w, &Request{Model: "bafkreimodel", Start: 0, End: 4, Tokens: []int32{1, -2, 3}})
		}},
		{"request-hidden", func(w io.Writer) error {
			return WriteRequest(w, &Request{Model: "m", Start: 3, End: 9, Hidden: []float32{1, 2.5, -3, 4}, HiddenSize: 2})
		}},
		{"boundary", func(w io.Writer) error { return WriteBoundary(w, 3, []float32{1, -0.5, float32(math.Inf(1))}) }},
		{"boundary-empty", func(w io.Writer) error { return WriteBoundary(w, 0, nil) }},
		{"boundary-big", func(w io.Writer) error { return WriteBoundary(w, 7, big) }},
		{"error", func(w io.Writer) error { return WriteError(w, CodeBusy, "later <x>") }},
		{"error-long", func(w io.Writer) error { return WriteError(w, CodeInternal, strings.Repeat("e", 5000)) }},
		{"raw-empty", func(w io.Writer) error { return writeFrame(w, frameBoundary, nil) }},
	}
	var lines []string
	var all bytes.Buffer
	for _, f := range writes {
		b := wiretest.WriteFrame(t, &all, f.name, f.write)
		lines = append(lines, fmt.Sprintf("write %s %s size=%d", f.name, wiretest.Hex(b), frameSize(len(b)-len(wiretest.Uvarint(uint64(len(b))))-1)))
	}
	r := bufio.NewReader(&all)
	for _, f := range writes {
		typ, body, err := readFrame(r, limitBoundary)
		lines = append(lines, fmt.Sprintf("read %s %s type=%d %s", f.name, errClass(err), typ, wiretest.Hex(body)))
	}

	reads := []struct {
		name  string
		in    []byte
		limit int
	}{
		{"empty", nil, limitRequest},
		{"zero-length", []byte{0}, limitRequest},
		{"length-only", []byte{5}, limitRequest},
		{"type-only", []byte{5, frameBoundary}, limitRequest},
		{"one-length-no-type", []byte{1}, limitRequest},
		{"one-length-boundary", []byte{1, frameBoundary}, limitRequest},
		{"prefix-cut", []byte{0x80}, limitRequest},
		{"prefix-overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, limitRequest},
		{"prefix-11-bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, limitRequest},
		{"huge", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, limitBoundary},
		{"over-limit", wiretest.Uvarint(52, frameBoundary), 50},
		{"at-limit-cut", wiretest.Uvarint(51, frameBoundary, 1), 50},
		{"error-over-type-limit", wiretest.Uvarint(maxJSON+2, frameError), limitBoundary},
		{"error-at-type-limit-cut", wiretest.Uvarint(maxJSON+1, frameError, '{'), limitBoundary},
		{"type-0", wiretest.Uvarint(2, 0, 0), limitRequest},
		{"type-4", wiretest.Uvarint(2, 4, 0), limitRequest},
		{"truncated", wiretest.Uvarint(10, frameBoundary, 1, 2), limitRequest},
		{"non-minimal-prefix", []byte{0x83, 0x00, frameBoundary, 1, 2}, limitRequest},
		{"limit-0", wiretest.Uvarint(2, frameBoundary, 0), 0},
		{"limit-1", wiretest.Uvarint(2, frameBoundary, 0), 1},
		{"limit-max-int", wiretest.Uvarint(2, frameBoundary, 0), math.MaxInt},
	}
	for _, rd := range reads {
		typ, body, err := readFrame(bufio.NewReader(bytes.NewReader(rd.in)), rd.limit)
		lines = append(lines, fmt.Sprintf("read %s %s type=%d body=%x", rd.name, errClass(err), typ, body))
	}
	for _, s := range []string{`{"code":"busy","message":"x"}`, `{"code":"busy","x":2}`, `{"code":"busy"}{}`, `{"code":"busy"}}`, `{"code":"busy"} `, `{}`, `[]`, `null`, ``} {
		_, err := decodeError([]byte(s))
		lines = append(lines, fmt.Sprintf("json %q %s", s, errClass(err)))
	}
	wiretest.Golden(t, "testdata/frames.golden", lines)
}
