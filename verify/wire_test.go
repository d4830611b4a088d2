package verify

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []*Request{
		{Model: "bafkreimodel", Start: 0, End: 4, Tokens: []int32{1, 2, 3}},
		{Model: "bafkreimodel", Start: 2, End: 3, Hidden: []float32{1, -2, 0.5, 4}, HiddenSize: 2},
	} {
		var buf bytes.Buffer
		if err := WriteRequest(&buf, r); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRequest(bufio.NewReader(&buf))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestBadRequestsRefused(t *testing.T) {
	good := &Request{Model: "m", Start: 1, End: 2, Hidden: []float32{1, 2}, HiddenSize: 2}
	cases := map[string]func() []byte{
		"too many positions": func() []byte {
			return EncodeRequest(&Request{Model: "m", Start: 0, End: 1, Tokens: make([]int32, MaxTokens+1)})
		},
		"no positions": func() []byte { return EncodeRequest(&Request{Model: "m", Start: 0, End: 1}) },
		"empty range": func() []byte {
			return EncodeRequest(&Request{Model: "m", Start: 2, End: 2, Hidden: []float32{1}, HiddenSize: 1})
		},
		"no model": func() []byte { return EncodeRequest(&Request{Start: 0, End: 1, Tokens: []int32{1}}) },
		"NaN input": func() []byte {
			return EncodeRequest(&Request{Model: "m", Start: 1, End: 2, Hidden: []float32{float32(math.NaN())}, HiddenSize: 1})
		},
		"truncated":          func() []byte { b := EncodeRequest(good); return b[:len(b)-1] },
		"trailing":           func() []byte { return append(EncodeRequest(good), 0) },
		"tokens after layer": func() []byte { b := EncodeRequest(good); b[0] = kindTokens; return b },
		"short header":       func() []byte { return []byte{1, 2, 3} },
	}
	for name, body := range cases {
		if _, err := DecodeRequest(body()); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", name, err)
		}
	}
}

func TestFrameLimits(t *testing.T) {
	// A frame declaring more than the reader expects is refused before
	// its body is read.
	var buf bytes.Buffer
	writeFrame(&buf, frameBoundary, make([]byte, 100))
	if _, _, err := readFrame(bufio.NewReader(&buf), 50); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("oversize frame: %v", err)
	}
	buf.Reset()
	writeFrame(&buf, 9, nil)
	if _, _, err := readFrame(bufio.NewReader(&buf), 50); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("unknown type: %v", err)
	}
	buf.Reset()
	buf.Write([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	if _, _, err := readFrame(bufio.NewReader(&buf), limitBoundary); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("huge length: %v", err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(EncodeRequest(&Request{Model: "bafkreimodel", Start: 0, End: 4, Tokens: []int32{1, 2, 3}}))
	f.Add(EncodeRequest(&Request{Model: "m", Start: 3, End: 9, Hidden: []float32{1, 2, 3, 4}, HiddenSize: 4}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if err := r.validate(); err != nil {
			t.Fatalf("decoded a request that does not validate: %v", err)
		}
		if !bytes.Equal(EncodeRequest(r), b) {
			t.Fatal("a decoded request does not encode back to its bytes")
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	WriteBoundary(&buf, 3, []float32{1, 2, float32(math.NaN())})
	f.Add(buf.Bytes())
	buf.Reset()
	WriteError(&buf, CodeBusy, "later")
	f.Add(buf.Bytes())
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, body, err := readFrame(bufio.NewReader(bytes.NewReader(b)), 1<<16)
		if err != nil {
			return
		}
		switch typ {
		case frameBoundary:
			if l, v, err := DecodeBoundary(body); err == nil && (!bytes.Equal(EncodeBoundary(l, v), body)) {
				t.Fatal("a decoded boundary does not encode back to its bytes")
			}
		case frameError:
			decodeError(body)
		case frameRequest:
			DecodeRequest(body)
		}
	})
}
