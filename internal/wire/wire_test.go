package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecodeJSON(t *testing.T) {
	var v struct{ A int }
	if err := DecodeJSON([]byte(`{"A":1}`), &v); err != nil || v.A != 1 {
		t.Fatalf("%v %+v", err, v)
	}
	if err := DecodeJSON([]byte(`{"B":1}`), &v); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("unknown field: %v", err)
	}
	for _, in := range []string{`{"A":1} {}`, `{"A":1}}`, `{"A":1}]`, `{"A":1} x`, `{"A":1},`} {
		if err := DecodeJSON([]byte(in), &v); !errors.Is(err, ErrTrailing) {
			t.Errorf("trailing %q: %v", in, err)
		}
	}
	if err := DecodeJSON([]byte(" {\"A\":2}\r\n\t "), &v); err != nil || v.A != 2 {
		t.Fatalf("white space around the value: %v %+v", err, v)
	}
}

func TestReadN(t *testing.T) {
	data := bytes.Repeat([]byte{7}, 200<<10)
	var asked []int
	b, err := ReadN(bytes.NewReader(data), len(data), func(n int) error { asked = append(asked, n); return nil })
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("%v", err)
	}
	if want := []int{64 << 10, 128 << 10, 200 << 10}; len(asked) != 3 || asked[0] != want[0] || asked[2] != want[2] {
		t.Fatalf("reservations %v, want %v", asked, want)
	}
	// A peer that sends a little of what it declared costs the first chunk.
	asked = nil
	if _, err := ReadN(bytes.NewReader(data[:10]), 1<<30, func(n int) error { asked = append(asked, n); return nil }); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short: %v", err)
	}
	if len(asked) != 1 {
		t.Fatalf("short read grew the buffer: %v", asked)
	}
	stop := errors.New("no budget")
	if _, err := ReadN(bytes.NewReader(data), len(data), func(n int) error {
		if n > 64<<10 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Fatalf("budget: %v", err)
	}
}
