package wire

import (
	"errors"
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
