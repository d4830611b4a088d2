package shards

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/internal/wire/wiretest"
)

// errClass names what callers can tell about a read's error.
func errClass(err error) string {
	return wiretest.ErrClass(err, wiretest.Sentinel{Name: "bad", Err: ErrBadFrame})
}

// onlyReader hides every method of a reader but Read, as a stream does.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestFrameGolden pins the bytes of every kind of transfer frame, and what
// a reader makes of malformed ones, so that the framing code can change
// without a peer of another version noticing.
func TestFrameGolden(t *testing.T) {
	mc := "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
	frames := []struct {
		name string
		v    any
	}{
		{"slice", transferRequest{Op: OpSlice, Model: mc, From: 1, To: 3, Offset: 100}},
		{"header", transferRequest{Op: OpHeader, Model: mc}},
		{"model", &transferRequest{Op: OpModel, Model: mc, Offset: 1 << 40}},
		{"manifest", transferRequest{Op: OpManifest, Model: mc}},
		{"ok", transferResponse{CID: mc, Size: 1000, Offset: 100, Layers: 28}},
		{"ok-zero", transferResponse{CID: mc}},
		{"refused", transferResponse{Code: CodeNotHeld, Error: "not <here> \"x\""}},
		{"big", transferResponse{Code: CodeInternal, Error: strings.Repeat("é", 20000)}},
	}
	var lines []string
	var all bytes.Buffer
	for _, f := range frames {
		b := wiretest.WriteFrame(t, &all, f.name, func(w io.Writer) error { return writeFrame(w, f.v) })
		lines = append(lines, "write "+f.name+" "+wiretest.Hex(b))
	}
	err := writeFrame(io.Discard, transferResponse{Error: strings.Repeat("x", maxFrame)})
	lines = append(lines, "write oversize "+errClass(err))
	all.WriteString("raw file bytes")
	r := onlyReader{&all}
	for _, f := range frames {
		var err error
		var again bytes.Buffer
		switch f.v.(type) {
		case transferRequest, *transferRequest:
			var v transferRequest
			err = readFrame(r, &v)
			writeFrame(&again, v)
		default:
			var v transferResponse
			err = readFrame(r, &v)
			writeFrame(&again, v)
		}
		var want bytes.Buffer
		writeFrame(&want, f.v)
		lines = append(lines, fmt.Sprintf("read %s %s same=%v", f.name, errClass(err), bytes.Equal(again.Bytes(), want.Bytes())))
	}
	rest, _ := io.ReadAll(r)
	lines = append(lines, fmt.Sprintf("after the frames %q", rest))

	frame := func(s string) []byte { return wiretest.Uvarint(uint64(len(s)), []byte(s)...) }
	reads := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"zero-length", []byte{0}},
		{"length-only", []byte{5}},
		{"prefix-cut", []byte{0x80}},
		{"prefix-cut-2", []byte{0x80, 0x80}},
		{"prefix-4-bytes", []byte{0x80, 0x80, 0x80, 0x01}},
		{"prefix-3-bytes-big", []byte{0xff, 0xff, 0x7f}},
		{"over-max", wiretest.Uvarint(maxFrame+1, '{')},
		{"at-max-cut", wiretest.Uvarint(maxFrame, '{')},
		{"truncated", wiretest.Uvarint(10, '{')},
		{"non-minimal-prefix", append([]byte{0x82, 0x80, 0x00}, "{}"...)},
		{"ok", frame(`{"code":"busy","error":"x"}`)},
		{"unknown-field", frame(`{"code":"busy","x":1}`)},
		{"trailing-object", frame(`{"code":"busy"}{}`)},
		{"trailing-brace", frame(`{"code":"busy"}}`)},
		{"trailing-space", frame(`{"code":"busy"} `)},
		{"leading-space", frame(` {"code":"busy"}`)},
		{"not-json", frame("hello")},
		{"array", frame(`[]`)},
		{"null", frame(`null`)},
		{"wrong-type", frame(`{"code":1}`)},
		{"duplicate", frame(`{"code":"a","code":"b"}`)},
		{"case", frame(`{"CODE":"busy"}`)},
	}
	for _, rd := range reads {
		var v transferResponse
		err := readFrame(onlyReader{bytes.NewReader(rd.in)}, &v)
		if err != nil {
			v = transferResponse{} // what a failed read leaves in v is not part of the contract
		}
		lines = append(lines, fmt.Sprintf("read %s %s %+v", rd.name, errClass(err), v))
	}
	wiretest.Golden(t, "testdata/frames.golden", lines)
}

// TestManifestGolden pins which spellings of a manifest ParseManifest
// accepts, so that its decoder can change without a root changing meaning.
func TestManifestGolden(t *testing.T) {
	_, _, b, _ := buildManifest(t, testModel{"qwen3", 2, 64, true, false})
	body := b[:len(b)-1]
	cases := []struct {
		name string
		in   []byte
	}{
		{"canonical", b},
		{"trailing-space", append(bytes.Clone(b), ' ')},
		{"trailing-newline", append(bytes.Clone(b), '\n')},
		{"trailing-brace", append(bytes.Clone(b), '}')},
		{"trailing-bracket", append(bytes.Clone(b), ']')},
		{"trailing-object", append(bytes.Clone(b), "{}"...)},
		{"leading-space", append([]byte{' '}, b...)},
		{"unknown-field", append(bytes.Clone(body), `,"x":1}`...)},
		{"spaced", bytes.Replace(b, []byte(`"version":1`), []byte(`"version": 1`), 1)},
		{"upper-case-key", bytes.Replace(b, []byte(`"version":1`), []byte(`"Version":1`), 1)},
		{"empty", nil},
		{"null", []byte("null")},
		{"object", []byte("{}")},
		{"array", []byte("[]")},
	}
	var lines []string
	for _, tc := range cases {
		_, err := ParseManifest(tc.in)
		class := "ok"
		if err != nil {
			class = "other"
			if errors.Is(err, ErrBadManifest) {
				class = "bad"
			}
		}
		lines = append(lines, "manifest "+tc.name+" "+class)
	}
	wiretest.Golden(t, "testdata/manifest.golden", lines)
}
