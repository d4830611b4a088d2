package wiretest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHex(t *testing.T) {
	if got := Hex([]byte{0, 0xab}); got != "00ab" {
		t.Errorf("Hex short = %q", got)
	}
	if got := Hex(bytes.Repeat([]byte{1}, 1024)); got != strings.Repeat("01", 1024) {
		t.Errorf("Hex at 1 KiB is not plain hex: %q...", got[:40])
	}
	got := Hex(bytes.Repeat([]byte{1}, 1025))
	if want := strings.Repeat("01", 32) + "... 1025 bytes sha256 "; !strings.HasPrefix(got, want) || len(got) != len(want)+64 {
		t.Errorf("Hex long = %q", got)
	}
}

func TestErrClass(t *testing.T) {
	errBad := errors.New("bad")
	errBig := errors.New("big")
	named := []Sentinel{{"bad", errBad}, {"big", errBig}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{errors.New("x"), "other"},
		{io.EOF, "eof"},
		{fmt.Errorf("%w: %w", errBig, io.ErrUnexpectedEOF), "big,unexpected-eof"},
		{fmt.Errorf("%w: %w: %w", io.EOF, errBig, errBad), "bad,big,eof"},
	} {
		if got := ErrClass(tc.err, named...); got != tc.want {
			t.Errorf("ErrClass(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestWriteFrame(t *testing.T) {
	var all bytes.Buffer
	a := WriteFrame(t, &all, "a", func(w io.Writer) error { _, err := w.Write([]byte("ab")); return err })
	b := WriteFrame(t, &all, "b", func(w io.Writer) error { _, err := w.Write(Uvarint(300, 'c')); return err })
	if string(a) != "ab" || !bytes.Equal(b, []byte{0xac, 0x02, 'c'}) || all.String() != "ab\xac\x02c" {
		t.Errorf("frames %q %q, all %q", a, b, all.Bytes())
	}
}

func TestGoldenUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.golden")
	defer func(u bool) { *update = u }(*update)
	*update = true
	Golden(t, path, []string{"one", "two"})
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("wrote %q, %v", b, err)
	}
	*update = false
	Golden(t, path, []string{"one", "two"})
}
