package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

var errBad = errors.New("test: bad frame")

// typed is a codec of types 1 (at most 16 bytes long) and 2 (any length).
var typed = &Codec{Types: []uint64{0, 16, NoLimit}, Err: errBad}

var untyped = &Codec{Err: errBad}

// countWriter counts the Writes a frame takes.
type countWriter struct {
	bytes.Buffer
	writes int
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// onlyReader hides every method of a reader but Read, as a stream does.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestCodecRoundTrip(t *testing.T) {
	for _, c := range []*Codec{typed, untyped} {
		for _, n := range []int{0, 1, 127, 128, smallWrite, smallWrite + 1, 300 << 10} {
			body := bytes.Repeat([]byte{byte(n)}, n)
			var w countWriter
			if err := c.Write(&w, 2, body); err != nil {
				t.Fatal(err)
			}
			if w.Len() != c.Size(n) {
				t.Errorf("typed=%v body %d: %d bytes written, Size says %d", c.typed(), n, w.Len(), c.Size(n))
			}
			if want := 1 + btoi(n > smallWrite); w.writes != want {
				t.Errorf("body %d: %d writes, want %d", n, w.writes, want)
			}
			if c == untyped && n == 0 {
				continue // an empty untyped frame is length 0: refused
			}
			typ, got, err := c.Read(bytes.NewReader(w.Bytes()), NoLimit, nil)
			if err != nil || !bytes.Equal(got, body) || (c == typed && typ != 2) || (c == untyped && typ != 0) {
				t.Errorf("typed=%v body %d: read type %d, %d bytes, %v", c.typed(), n, typ, len(got), err)
			}
		}
	}
	// The bytes are a uvarint length, the type, the body.
	var b bytes.Buffer
	typed.Write(&b, 1, []byte("hi"))
	untyped.Write(&b, 0, make([]byte, 200))
	if want := append([]byte{3, 1, 'h', 'i', 0xc8, 0x01}, make([]byte, 200)...); !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("bytes % x", b.Bytes())
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestCodecReadErrors(t *testing.T) {
	uv := func(n uint64, rest ...byte) []byte { return append(binary.AppendUvarint(nil, n), rest...) }
	cases := []struct {
		name  string
		c     *Codec
		in    []byte
		limit uint64
		want  error // nil: read
	}{
		{"empty", untyped, nil, 100, io.EOF},
		{"zero length", untyped, []byte{0}, 100, errBad},
		{"over the limit", untyped, uv(101), 100, errBad},
		{"at the limit", untyped, uv(100, make([]byte, 100)...), 100, nil},
		{"prefix cut", untyped, []byte{0x80}, 1000, io.ErrUnexpectedEOF},
		{"prefix longer than the limit's", untyped, []byte{0x81, 0x80, 0x00}, 1000, errBad},
		{"padded prefix within the limit's", untyped, []byte{0x81, 0x00, 'x'}, 1000, nil},
		{"prefix of 11 bytes", untyped, bytes.Repeat([]byte{0x80}, 11), NoLimit, errBad},
		{"body cut", untyped, uv(10, 'x'), 100, io.ErrUnexpectedEOF},
		{"length only", typed, []byte{5}, 100, io.ErrUnexpectedEOF},
		{"type 0", typed, uv(1, 0), 100, errBad},
		{"type past the table", typed, uv(1, 3), 100, errBad},
		{"type 1 at its limit", typed, uv(16, append([]byte{1}, make([]byte, 15)...)...), 100, nil},
		{"type 1 over its limit", typed, uv(17, 1), 100, errBad},
		{"type 2 over the read's limit", typed, uv(101, 2), 100, errBad},
		{"type byte only", typed, uv(1, 2), 100, nil},
		{"huge declared, nothing sent", typed, uv(1<<40, 2), NoLimit, io.ErrUnexpectedEOF},
	}
	for _, tc := range cases {
		for _, r := range []io.Reader{bytes.NewReader(tc.in), onlyReader{bytes.NewReader(tc.in)}, bufio.NewReader(bytes.NewReader(tc.in))} {
			_, _, err := tc.c.Read(r, tc.limit, nil)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("%s (%T): %v, want %v", tc.name, r, err, tc.want)
			}
			if tc.want == io.EOF && err != io.EOF {
				t.Errorf("%s: a clean end is io.EOF itself, not %v", tc.name, err)
			}
		}
	}
}

// A reader without ReadByte (a raw stream) keeps every byte after the frame.
func TestCodecReadsNoFurther(t *testing.T) {
	var b bytes.Buffer
	untyped.WriteJSON(&b, 0, map[string]int{"a": 1}, NoLimit)
	typed.Write(&b, 2, []byte{9, 9})
	b.WriteString("raw")
	r := onlyReader{&b}
	var v map[string]int
	if _, body, err := untyped.Read(r, 100, nil); err != nil || untyped.DecodeJSON(body, &v) != nil || v["a"] != 1 {
		t.Fatalf("%v %v", err, v)
	}
	if typ, body, err := typed.Read(r, 100, nil); err != nil || typ != 2 || !bytes.Equal(body, []byte{9, 9}) {
		t.Fatalf("%d %v %v", typ, body, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "raw" {
		t.Fatalf("left %q", rest)
	}
}

func TestCodecReserve(t *testing.T) {
	var b bytes.Buffer
	untyped.Write(&b, 0, make([]byte, 200<<10))
	var asked [][2]int
	_, _, err := untyped.Read(bytes.NewReader(b.Bytes()), NoLimit, func(n, size int) error {
		asked = append(asked, [2]int{n, size})
		return nil
	})
	if err != nil || len(asked) != 3 || asked[0] != [2]int{200 << 10, 64 << 10} || asked[2] != [2]int{200 << 10, 200 << 10} {
		t.Fatalf("%v: asked %v", err, asked)
	}
	stop := errors.New("no budget")
	if _, _, err := untyped.Read(bytes.NewReader(b.Bytes()), NoLimit, func(n, size int) error { return stop }); err != stop {
		t.Fatalf("refused: %v", err)
	}
}

func TestCodecJSON(t *testing.T) {
	var b bytes.Buffer
	if err := untyped.WriteJSON(&b, 0, strings.Repeat("x", 98), 100); err != nil || b.Len() != 101 {
		t.Fatalf("%v, %d bytes", err, b.Len())
	}
	if err := untyped.WriteJSON(&b, 0, strings.Repeat("x", 99), 100); !errors.Is(err, errBad) || b.Len() != 101 {
		t.Fatalf("over the limit: %v, %d bytes written", err, b.Len())
	}
	if err := typed.WriteJSON(&b, 1, 1, 1); !errors.Is(err, errBad) {
		t.Fatalf("a typed frame's limit counts its type byte: %v", err)
	}
	lenient := &Codec{UnknownFields: true, Err: errBad}
	var v struct{ A int }
	for _, tc := range []struct {
		in          string
		strict, lax bool // decodes
	}{
		{`{"A":1}`, true, true},
		{` {"A":1} `, true, true},
		{`{"A":1,"B":2}`, false, true},
		{`{"A":1}}`, false, false},
		{`{"A":1}{}`, false, false},
		{`{"A":"x"}`, false, false},
		{``, false, false},
		{` `, false, false},
		{`{`, false, false},
	} {
		if err := untyped.DecodeJSON([]byte(tc.in), &v); (err == nil) != tc.strict || (err != nil && !errors.Is(err, errBad)) ||
			errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("strict %q: %v", tc.in, err)
		}
		if err := lenient.DecodeJSON([]byte(tc.in), &v); (err == nil) != tc.lax || (err != nil && !errors.Is(err, errBad)) {
			t.Errorf("lenient %q: %v", tc.in, err)
		}
	}
}

func TestReadN(t *testing.T) {
	data := bytes.Repeat([]byte{7}, 200<<10)
	var asked []int
	b, err := readN(bytes.NewReader(data), len(data), func(n int) error { asked = append(asked, n); return nil })
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("%v", err)
	}
	if want := []int{64 << 10, 128 << 10, 200 << 10}; len(asked) != 3 || asked[0] != want[0] || asked[2] != want[2] {
		t.Fatalf("reservations %v, want %v", asked, want)
	}
	// A peer that sends a little of what it declared costs the first chunk.
	asked = nil
	if _, err := readN(bytes.NewReader(data[:10]), 1<<30, func(n int) error { asked = append(asked, n); return nil }); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short: %v", err)
	}
	if len(asked) != 1 {
		t.Fatalf("short read grew the buffer: %v", asked)
	}
	stop := errors.New("no budget")
	if _, err := readN(bytes.NewReader(data), len(data), func(n int) error {
		if n > 64<<10 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Fatalf("budget: %v", err)
	}
}

// FuzzCodecRead: whatever the bytes, a read ends in a frame within its
// limits that writes back to a frame reading the same, having taken no
// byte past it, or in an error of one of the documented kinds.
func FuzzCodecRead(f *testing.F) {
	var b bytes.Buffer
	typed.Write(&b, 1, []byte("hello"))
	f.Add(b.Bytes(), true, uint16(100))
	b.Reset()
	untyped.WriteJSON(&b, 0, map[string]string{"a": "b"}, NoLimit)
	f.Add(b.Bytes(), false, uint16(100))
	f.Add([]byte{0x81, 0x00, 2}, true, uint16(1000))
	f.Add([]byte{0xff, 0xff, 0xff, 0x01}, false, uint16(0xffff))
	f.Fuzz(func(t *testing.T, in []byte, isTyped bool, limit uint16) {
		c := untyped
		if isTyped {
			c = typed
		}
		r := bytes.NewReader(in)
		typ, body, err := c.Read(onlyReader{r}, uint64(limit), func(n, size int) error {
			if size > n || n > int(limit) {
				t.Fatalf("asked to reserve %d of a %d-byte body, limit %d", size, n, limit)
			}
			return nil
		})
		if err != nil {
			if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errBad) {
				t.Fatalf("error of no documented kind: %v", err)
			}
			return
		}
		took := len(in) - r.Len()
		if c.length(len(body)) > uint64(limit) || took < c.Size(len(body)) || took > c.Size(len(body))+uvarintLen(uint64(limit)) {
			t.Fatalf("%d-byte body in %d bytes, limit %d", len(body), took, limit)
		}
		var w bytes.Buffer
		c.Write(&w, typ, body)
		t2, b2, err := c.Read(&w, uint64(limit), nil)
		if err != nil || t2 != typ || !bytes.Equal(b2, body) {
			t.Fatalf("written back, read %d %x %v", t2, b2, err)
		}
	})
}
