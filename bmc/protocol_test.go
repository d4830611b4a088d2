package bmc

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustHandle(t testing.TB, s string) Handle {
	t.Helper()
	h, err := ParseHandle(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHandle(t *testing.T) {
	h := HandleFor([]byte("12D3KooWexample"))
	if len(h.String()) != 12 {
		t.Fatalf("handle %q: want 12 hex chars", h)
	}
	back, err := ParseHandle(h.String())
	if err != nil || back != h {
		t.Fatalf("round trip %v: %v %v", h, back, err)
	}
	for _, bad := range []string{"", "0123456789a", "0123456789abc", "0123456789AB", "0123456789ag", " 123456789ab"} {
		if _, err := ParseHandle(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseHandle(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestEncode(t *testing.T) {
	n := mustHandle(t, "0123456789ab")
	m := mustHandle(t, "ba9876543210")
	key := make([]byte, KeySize)
	for i := range key {
		key[i] = byte(i)
	}
	tests := []struct {
		name    string
		enc     func() ([]byte, error)
		want    string
		wantErr error
	}{
		{"ping", func() ([]byte, error) { return EncodePing("") }, "PING\n", nil},
		{"ping token", func() ([]byte, error) { return EncodePing("abc-_9") }, "PING abc-_9\n", nil},
		{"ping bad token", func() ([]byte, error) { return EncodePing("a b") }, "", ErrMalformed},
		{"ping long token", func() ([]byte, error) { return EncodePing(strings.Repeat("a", 17)) }, "", ErrMalformed},
		{"hb", func() ([]byte, error) { return EncodeHeartbeat(n, 255) }, "HB 0123456789ab 255\n", nil},
		{"pset", func() ([]byte, error) { return EncodeSetPartition(Partition{n, m, 0, 65535}) }, "PSET 0123456789ab ba9876543210 0 65535\n", nil},
		{"pset empty", func() ([]byte, error) { return EncodeSetPartition(Partition{n, m, 5, 5}) }, "", ErrMalformed},
		{"pdel", func() ([]byte, error) { return EncodeDeletePartition(n, m) }, "PDEL 0123456789ab ba9876543210\n", nil},
		{"ndel", func() ([]byte, error) { return EncodeForgetNode(n) }, "NDEL 0123456789ab\n", nil},
		{"cfg", func() ([]byte, error) { return EncodeConfig(Config{3 * time.Second, 2}) }, "CFG 3000 2\n", nil},
		{"cfg short period", func() ([]byte, error) { return EncodeConfig(Config{99 * time.Millisecond, 2}) }, "", ErrMalformed},
		{"cfg sub-ms", func() ([]byte, error) { return EncodeConfig(Config{1500 * time.Microsecond, 2}) }, "", ErrMalformed},
		{"cfg misses 0", func() ([]byte, error) { return EncodeConfig(Config{time.Second, 0}) }, "", ErrMalformed},
		{"cfg misses 256", func() ([]byte, error) { return EncodeConfig(Config{time.Second, 256}) }, "", ErrMalformed},
		{"tab", func() ([]byte, error) { return EncodeTab("abcdefghijklmnop") }, "TAB abcdefghijklmnop\n", nil},
		{"tab short nonce", func() ([]byte, error) { return EncodeTab("abc") }, "", ErrMalformed},
		{"tab long nonce", func() ([]byte, error) { return EncodeTab(strings.Repeat("a", 33)) }, "", ErrMalformed},
		{"key", func() ([]byte, error) { return EncodeKey(key) }, "KEY AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n", nil},
		{"key short", func() ([]byte, error) { return EncodeKey(key[:31]) }, "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.enc()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
			if len(got) > MaxRequest {
				t.Fatalf("%d bytes > MaxRequest", len(got))
			}
		})
	}
}

func TestRequestTooLong(t *testing.T) {
	if _, err := request("X", strings.Repeat("a", 61)); !errors.Is(err, ErrTooLong) {
		t.Fatalf("err = %v, want ErrTooLong", err)
	}
	if _, err := request("X", strings.Repeat("a", 60)); err != nil {
		t.Fatalf("63-byte request refused: %v", err)
	}
}

func TestParseLine(t *testing.T) {
	h := mustHandle(t, "0123456789ab")
	m := mustHandle(t, "ba9876543210")
	good := []struct {
		line string
		want Reply
	}{
		{"READY fw=1.0.0 boot=7", Ready{"1.0.0", 7}},
		{"PONG 0", Pong{}},
		{"PONG 18446744073 tok", Pong{18446744073 * time.Millisecond, "tok"}},
		{"INFO proto=1 fw=1.0.0 boot=4294967295 key=1 nmax=32 pmax=32", Info{1, "1.0.0", 4294967295, true, 32, 32}},
		{"STAT seq=5 n=1 p=2 ram=300 mac=22728", Stat{5, 1, 2, 300, 22728 * time.Microsecond}},
		{"CFG 3000 2", Config{3 * time.Second, 2}},
		{"OK 0", OK{0}},
		{"ERR toolong", ErrorReply{"toolong"}},
		{"T 1 2 4594 3000 2", Header{1, 2, 4594 * time.Millisecond, Config{3 * time.Second, 2}}},
		{"N 0123456789ab L 2147 7", Node{h, true, 2147 * time.Millisecond, 7}},
		{"N 0123456789ab D 0 0", Node{h, false, 0, 0}},
		{"P 0123456789ab ba9876543210 0 65535", Partition{h, m, 0, 65535}},
		{"S n7GIYwIqg34rFRHfk2ciMfdBij4X4OdzuDYy3p5cIOk", nil},
	}
	for _, tt := range good {
		got, err := ParseLine(tt.line)
		if err != nil {
			t.Errorf("ParseLine(%q): %v", tt.line, err)
			continue
		}
		if tt.want != nil && got != tt.want {
			t.Errorf("ParseLine(%q) = %#v, want %#v", tt.line, got, tt.want)
		}
		if got.String() != tt.line {
			t.Errorf("String() = %q, want %q", got.String(), tt.line)
		}
	}
	bad := []string{
		"", " ", "OK", "OK 01", "OK -1", "OK 4294967296", "OK 1 2", "OK  1", "ok 1",
		"ERR", "ERR Full", "ERR a b", "PONG", "PONG x", "PONG 1 a+b",
		"INFO proto=1 fw=1.0.0 boot=1 key=2 nmax=32 pmax=32", "INFO fw=1.0.0 proto=1 boot=1 key=1 nmax=32 pmax=32",
		"T 1 2 3 4", "T 1 2 3 70000 2", "N 0123456789ab X 1 1", "N 0123456789AB L 1 1", "N 0123456789ab L 1 256",
		"P 0123456789ab ba9876543210 5 5", "P 0123456789ab ba9876543210 0 65536",
		"S AAAA", "S n7GIYwIqg34rFRHfk2ciMfdBij4X4OdzuDYy3p5cIOl", "S n7GIYwIqg34rFRHfk2ciMfdBij4X4OdzuDYy3p5cIO=",
		"READY fw= boot=1", "garbage", "\x00\x01", strings.Repeat("OK 1", 20),
	}
	for _, line := range bad {
		if r, err := ParseLine(line); err == nil {
			t.Errorf("ParseLine(%q) = %#v, want error", line, r)
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseLine(%q) error %v does not match ErrMalformed", line, err)
		}
	}
}

func TestDeviceErrorIs(t *testing.T) {
	tests := []struct {
		code string
		want error
	}{
		{"nokey", ErrNoKey}, {"provisioned", ErrProvisioned}, {"full", ErrFull},
		{"notfound", ErrNotFound}, {"toolong", ErrTooLong}, {"unknown", ErrRejected},
	}
	for _, tt := range tests {
		err := error(&DeviceError{Cmd: "X", Code: tt.code})
		if !errors.Is(err, tt.want) || !errors.Is(err, ErrRejected) {
			t.Errorf("code %s: errors.Is(%v) false", tt.code, tt.want)
		}
	}
	if errors.Is(&DeviceError{Code: "full"}, ErrNoKey) {
		t.Error("full matched ErrNoKey")
	}
}
