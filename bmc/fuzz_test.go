package bmc

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseLine: no input panics, and every accepted line is canonical
// (String gives back the same bytes), which Bridge.TableRaw relies on.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"READY fw=1.0.0 boot=7", "PONG 12 tok", "INFO proto=1 fw=1.0.0 boot=1 key=0 nmax=32 pmax=32",
		"STAT seq=5 n=1 p=2 ram=300 mac=22728", "CFG 3000 2", "OK 3", "ERR arg", "T 1 2 4594 3000 2",
		"N 0123456789ab L 2147 7", "P 0123456789ab ba9876543210 0 14",
		"S n7GIYwIqg34rFRHfk2ciMfdBij4X4OdzuDYy3p5cIOk", "OK 01", "\xff\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseLine(line)
		if err != nil {
			return
		}
		if r.String() != line {
			t.Fatalf("ParseLine(%q).String() = %q", line, r.String())
		}
		if len(line) > MaxReply || strings.ContainsAny(line, "\r\n") {
			t.Fatalf("accepted %q", line)
		}
	})
}

// FuzzVerifyTable: arbitrary dumps never panic, and a dump that verifies
// re-encodes to the same bytes.
func FuzzVerifyTable(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "table.golden")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("T 1 1 1 3000 2\nS n7GIYwIqg34rFRHfk2ciMfdBij4X4OdzuDYy3p5cIOk\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := ParseTable(raw); err != nil {
			return
		}
		tab, err := VerifyTable(testKey(), testNonce, raw)
		if err != nil {
			return
		}
		again, err := SignTable(testKey(), testNonce, tab)
		if err != nil || !bytes.Equal(again, bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))) {
			t.Fatalf("re-sign of %q = %q, %v", raw, again, err)
		}
	})
}
