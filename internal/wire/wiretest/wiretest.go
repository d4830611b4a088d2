// Package wiretest holds what the golden frame tests of the swarm's stream
// protocols (moa, pipeline, shards, verify) share: comparing a test's lines
// with a golden file, printing frame bytes, naming the sentinels a read's
// error matches, and writing frames one by one. What each protocol writes
// and reads stays in its own test.
//
// Importing this package registers the test flag -update: with it,
// Golden rewrites each golden file from the current code instead of
// comparing, as in
//
//	go test ./moa -run Golden -update
//
// A package whose tests import wiretest must not register an -update flag
// of its own (the flag package would panic on the second).
//
// It is standard library and testing only, a test harness: internal/tiers
// exempts it by its name.
package wiretest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// Golden compares lines with the golden file at path, one line of the file
// per line, and reports each line that differs; with -update it rewrites
// the file instead. The file holds the lines each ended by a newline.
func Golden(t testing.TB, path string, lines []string) {
	t.Helper()
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

// Hex is b in hex, or for a b longer than 1 KiB its first 32 bytes, its
// length and its SHA-256, so that a golden line stays short.
func Hex(b []byte) string {
	if len(b) <= 1024 {
		return hex.EncodeToString(b)
	}
	return fmt.Sprintf("%x... %d bytes sha256 %x", b[:32], len(b), sha256.Sum256(b))
}

// Sentinel is an error a caller can tell with errors.Is, and the name a
// golden line gives it.
type Sentinel struct {
	Name string
	Err  error
}

// ErrClass names what callers can tell about a read's error: "ok" for nil,
// else the names of the sentinels it matches, the named ones in order, then
// "unexpected-eof" and "eof" for io.ErrUnexpectedEOF and io.EOF, joined by
// commas; "other" if it matches none.
func ErrClass(err error, named ...Sentinel) string {
	if err == nil {
		return "ok"
	}
	var c []string
	for _, k := range slices.Concat(named, []Sentinel{{"unexpected-eof", io.ErrUnexpectedEOF}, {"eof", io.EOF}}) {
		if errors.Is(err, k.Err) {
			c = append(c, k.Name)
		}
	}
	if len(c) == 0 {
		return "other"
	}
	return strings.Join(c, ",")
}

// WriteFrame writes one frame with write into a buffer of its own, fails t
// if that errs, appends the frame's bytes to all and returns them.
func WriteFrame(t testing.TB, all *bytes.Buffer, name string, write func(w io.Writer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	all.Write(b.Bytes())
	return b.Bytes()
}

// Uvarint is n as a uvarint, then rest: the start of a frame a test makes
// by hand.
func Uvarint(n uint64, rest ...byte) []byte {
	return append(binary.AppendUvarint(nil, n), rest...)
}
