package cli

import (
	"strings"
	"testing"
)

func TestProgressPlainLines(t *testing.T) {
	var b strings.Builder
	p := &Progress{W: &b}
	for done := int64(0); done <= 100<<20; done += 1 << 20 {
		p.Show("download x", done, 100<<20, true)
	}
	p.Show("verify x", 100<<20, 100<<20, true)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 12 { // 0%..100% by tenths, then the new label
		t.Fatalf("%d lines, want 12:\n%s", len(lines), b.String())
	}
	if !strings.HasPrefix(lines[10], "download x 100% [########################] 100.0 MiB/100.0 MiB") || !strings.HasPrefix(lines[11], "verify x") {
		t.Fatalf("lines:\n%s", b.String())
	}
	if strings.Contains(b.String(), "\r") {
		t.Fatal("carriage returns off a terminal")
	}
}

func TestProgressTerminal(t *testing.T) {
	var b strings.Builder
	p := &Progress{W: &b, TTY: true}
	p.Show("synth", 5, 10, false)
	p.Show("synth", 6, 10, false) // within 100 ms: held back
	p.Show("synth", 10, 10, false)
	p.Done()
	if got := strings.Count(b.String(), "\r\033[K"); got != 3 {
		t.Fatalf("%d rewrites, want 2 and the clear: %q", got, b.String())
	}
	if !strings.Contains(b.String(), "synth 100% [########################] 10/10") {
		t.Fatalf("%q", b.String())
	}
}
