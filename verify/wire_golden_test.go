package verify

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	}{{"bad", ErrBadFrame}, {"unexpected-eof", io.ErrUnexpectedEOF}, {"eof", io.EOF}} {
		if errors.Is(err, k.err) {
			c = append(c, k.name)
		}
	}
	if len(c) == 0 {
		return "other"
	}
	return strings.Join(c, ",")
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
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		all.Write(b.Bytes())
		lines = append(lines, fmt.Sprintf("write %s %s size=%d", f.name, goldenHex(b.Bytes()), frameSize(b.Len()-len(uvarint(uint64(b.Len())))-1)))
	}
	r := bufio.NewReader(&all)
	for _, f := range writes {
		typ, body, err := readFrame(r, limitBoundary)
		lines = append(lines, fmt.Sprintf("read %s %s type=%d %s", f.name, errClass(err), typ, goldenHex(body)))
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
		{"over-limit", uvarint(52, frameBoundary), 50},
		{"at-limit-cut", uvarint(51, frameBoundary, 1), 50},
		{"error-over-type-limit", uvarint(maxJSON+2, frameError), limitBoundary},
		{"error-at-type-limit-cut", uvarint(maxJSON+1, frameError, '{'), limitBoundary},
		{"type-0", uvarint(2, 0, 0), limitRequest},
		{"type-4", uvarint(2, 4, 0), limitRequest},
		{"truncated", uvarint(10, frameBoundary, 1, 2), limitRequest},
		{"non-minimal-prefix", []byte{0x83, 0x00, frameBoundary, 1, 2}, limitRequest},
		{"limit-0", uvarint(2, frameBoundary, 0), 0},
		{"limit-1", uvarint(2, frameBoundary, 0), 1},
		{"limit-max-int", uvarint(2, frameBoundary, 0), math.MaxInt},
	}
	for _, rd := range reads {
		typ, body, err := readFrame(bufio.NewReader(bytes.NewReader(rd.in)), rd.limit)
		lines = append(lines, fmt.Sprintf("read %s %s type=%d body=%x", rd.name, errClass(err), typ, body))
	}
	for _, s := range []string{`{"code":"busy","message":"x"}`, `{"code":"busy","x":2}`, `{"code":"busy"}{}`, `{"code":"busy"}}`, `{"code":"busy"} `, `{}`, `[]`, `null`, ``} {
		_, err := decodeError([]byte(s))
		lines = append(lines, fmt.Sprintf("json %q %s", s, errClass(err)))
	}
	golden(t, "frames.golden", lines)
}

// uvarint is n as a uvarint, then rest.
func uvarint(n uint64, rest ...byte) []byte {
	return append(binary.AppendUvarint(nil, n), rest...)
}
