package bmc_test

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/bmc"
)

// TestConformance walks every command through the firmware over a bare
// serial port, in order, checking each reply line.
func TestConformance(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	r := openRaw(t, board.Path())
	key := base64.RawURLEncoding.EncodeToString(newKey(t))
	const (
		n1 = "0123456789ab"
		n2 = "aaaaaaaaaaaa"
		m1 = "ba9876543210"
	)
	steps := []struct{ req, want string }{
		{"PING", `^PONG \d+$`},
		{"PING tok-_9", `^PONG \d+ tok-_9$`},
		{"INFO", `^INFO proto=1 fw=\S+ boot=1 key=0 nmax=32 pmax=32$`},
		{"STAT", `^STAT seq=0 n=0 p=0 ram=\d+ mac=0$`},
		{"CFG", `^CFG 3000 2$`},
		{"HB " + n1, `^OK 1$`},
		{"HB " + n1 + " 200", `^OK 2$`},
		{"HB " + n2 + " 0", `^OK 3$`},
		{"PSET " + n1 + " " + m1 + " 0 14", `^OK 4$`},
		{"PSET " + n2 + " " + m1 + " 14 28", `^OK 5$`},
		{"PSET " + n2 + " " + m1 + " 14 29", `^OK 6$`}, // replaces n2's range
		{"STAT", `^STAT seq=6 n=2 p=2 ram=\d+ mac=0$`},
		{"TAB abcdefghijklmnop", `^ERR nokey$`}, // unprovisioned: no dump
		{"KEY " + key, `^OK 6$`},
		{"KEY " + key, `^ERR provisioned$`},
		{"INFO", `^INFO proto=1 fw=\S+ boot=1 key=1 nmax=32 pmax=32$`},
		{"PDEL " + n2 + " " + m1, `^OK 7$`},
		{"PDEL " + n2 + " " + m1, `^ERR notfound$`},
		{"NDEL " + n2, `^OK 8$`},
		{"NDEL " + n2, `^ERR notfound$`},
		{"CFG 60000 5", `^OK 9$`},
		{"CFG", `^CFG 60000 5$`},
		{"PCLR", `^OK 10$`},
		{"NCLR", `^OK 11$`},
		{"STAT", `^STAT seq=11 n=0 p=0 ram=\d+ mac=0$`},
	}
	for _, s := range steps {
		got := r.cmd(s.req)
		if !regexp.MustCompile(s.want).MatchString(got) {
			t.Fatalf("%q -> %q, want %s", s.req, got, s.want)
		}
		if len(got) > bmc.MaxReply {
			t.Fatalf("%q -> %d-char reply", s.req, len(got))
		}
	}
	// A dump: T, N..., P..., S, every line parseable and short.
	r.cmd("HB " + n1 + " 9")
	r.cmd("PSET " + n1 + " " + m1 + " 0 14")
	r.send("TAB abcdefghijklmnopqrstuvwxyz0123456")
	if got := r.next(); got != "ERR arg" { // 33-char nonce: too long
		t.Fatalf("long nonce -> %q", got)
	}
	r.send("TAB abcdefghijklmnopqrstuvwxyz0123")
	want := []string{`^T 1 13 \d+ 60000 5$`, `^N ` + n1 + ` L \d+ 9$`, `^P ` + n1 + ` ` + m1 + ` 0 14$`, `^S [A-Za-z0-9_-]{43}$`}
	for _, w := range want {
		got := r.next()
		if !regexp.MustCompile(w).MatchString(got) {
			t.Fatalf("dump line %q, want %s", got, w)
		}
		if _, err := bmc.ParseLine(got); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.cmd("STAT"); !regexp.MustCompile(`^STAT seq=13 n=1 p=1 ram=\d+ mac=[1-9]\d*$`).MatchString(got) {
		t.Fatalf("STAT after TAB -> %q", got)
	}
}

// TestMalformedLines: every kind of bad line gets one ERR line, and the
// board keeps working.
func TestMalformedLines(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	r := openRaw(t, board.Path())
	h := "0123456789ab"
	key := base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	tests := []struct{ line, code string }{
		{"", "empty"},
		{"    ", "empty"},
		{strings.Repeat("P", 63), "toolong"},
		{"HB " + h + " " + strings.Repeat("1", 100), "toolong"},
		{"PING\x01", "char"},
		{"PING\t", "char"},
		{"PING \xff", "char"},
		{"ping", "unknown"},
		{"FOO", "unknown"},
		{"PINGX", "unknown"},
		{"PING a b", "arg"},
		{"PING a+b", "arg"},
		{"PING " + strings.Repeat("a", 17), "arg"},
		{"INFO x", "arg"},
		{"STAT x", "arg"},
		{"HB", "arg"},
		{"HB 0123456789a", "arg"},
		{"HB 0123456789abc", "arg"},
		{"HB 0123456789AB", "arg"},
		{"HB 0123456789ag", "arg"},
		{"HB " + h + " x", "arg"},
		{"HB " + h + " -1", "arg"},
		{"HB " + h + " 256", "range"},
		{"HB " + h + " 99999999999", "range"},
		{"HB " + h + " 1 2", "arg"},
		{"NDEL", "arg"},
		{"NDEL " + h, "notfound"},
		{"NCLR x", "arg"},
		{"PSET " + h + " " + h + " 0", "arg"},
		{"PSET " + h + " " + h + " 0 x", "arg"},
		{"PSET " + h + " " + h + " 5 5", "range"},
		{"PSET " + h + " " + h + " 6 5", "range"},
		{"PSET " + h + " " + h + " 0 65536", "range"},
		{"PSET " + h + " zz " + " 0 1", "arg"},
		{"PDEL " + h, "arg"},
		{"PDEL " + h + " " + h, "notfound"},
		{"PCLR x", "arg"},
		{"CFG 3000", "arg"},
		{"CFG 3000 2 1", "arg"},
		{"CFG 99 2", "range"},
		{"CFG 65536 2", "range"},
		{"CFG 3000 0", "range"},
		{"CFG 3000 256", "range"},
		{"CFG x 2", "arg"},
		{"TAB", "arg"},
		{"TAB short", "arg"},
		{"TAB abcdefghijklmno!", "arg"},
		{"TAB abcdefghijklmnop x", "arg"},
		{"TAB abcdefghijklmnop", "nokey"},
		{"KEY", "arg"},
		{"KEY " + key[:42], "arg"},
		{"KEY " + key[:42] + "B", "arg"}, // non-zero padding bits
		{"KEY " + key[:42] + "=", "arg"},
		{"A B C D E F G H", "unknown"},
		{"HB a b c d e f g h", "arg"},
	}
	for _, tt := range tests {
		got := r.cmd(tt.line)
		if got != "ERR "+tt.code {
			t.Errorf("%q -> %q, want ERR %s", tt.line, got, tt.code)
		}
	}
	if got := r.cmd("STAT"); !strings.HasPrefix(got, "STAT seq=0 n=0 p=0 ") {
		t.Fatalf("malformed lines changed state: %q", got)
	}
	// 62 characters is the longest accepted line (63 bytes with the LF).
	if line := "HB " + h + strings.Repeat(" ", 62-15); len(line) != 62 || r.cmd(line) != "OK 1" {
		t.Fatalf("62-char line refused")
	}
	if got := r.cmd("NCLR"); got != "OK 2" {
		t.Fatalf("NCLR -> %q", got)
	}
	// Table full: every slot taken, one more is refused, a known entry is not.
	for i := 0; i < bmc.MaxNodes; i++ {
		if got := r.cmd(fmt.Sprintf("HB %012x", i)); !strings.HasPrefix(got, "OK ") {
			t.Fatalf("HB %d -> %q", i, got)
		}
		if got := r.cmd(fmt.Sprintf("PSET %012x %s 0 1", i, h)); !strings.HasPrefix(got, "OK ") {
			t.Fatalf("PSET %d -> %q", i, got)
		}
	}
	for _, tt := range []struct{ line, want string }{
		{fmt.Sprintf("HB %012x", bmc.MaxNodes), "ERR full"},
		{fmt.Sprintf("PSET %012x %s 0 1", bmc.MaxParts, h), "ERR full"},
		{fmt.Sprintf("PSET %012x %012x 0 1", 0, 1), "ERR full"},
		{fmt.Sprintf("HB %012x", 0), "OK "},
		{fmt.Sprintf("PSET %012x %s 3 4", 0, h), "OK "},
	} {
		if got := r.cmd(tt.line); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%q -> %q, want %q", tt.line, got, tt.want)
		}
	}
}

// TestEveryLineGetsOneReply sends random byte lines and checks each gets
// exactly one reply, then that the board still answers.
func TestEveryLineGetsOneReply(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	r := openRaw(t, board.Path())
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"PING", "HB", "TAB", "PSET", "PDEL", "CFG", "KEY", "INFO", "STAT", "NDEL", "NCLR", "PCLR"}
	for i := 0; i < 150; i++ {
		var b []byte
		if i%2 == 0 {
			b = append(b, words[rng.IntN(len(words))]...)
			b = append(b, ' ')
		}
		for n := rng.IntN(80); n > 0; n-- {
			c := byte(rng.IntN(256))
			if c == '\n' {
				c = ' '
			}
			b = append(b, c)
		}
		// PING with a random token and KEY could succeed; anything else is an error.
		got := r.cmd(string(b))
		if _, err := bmc.ParseLine(got); err != nil {
			t.Fatalf("line %q -> unparseable reply %q", b, got)
		}
		if pong := r.cmd(fmt.Sprintf("PING n%d", i)); !strings.HasSuffix(pong, fmt.Sprintf(" n%d", i)) {
			t.Fatalf("after %q: PING -> %q: replies out of step", b, pong)
		}
	}
}
