// Package wire holds what every stream protocol and record of the swarm
// reads and writes input with: strict JSON decoding (unknown fields and
// trailing data are errors) and the one frame codec (Codec: a uvarint
// length, a type byte or not, a body), whose reads bound each frame and
// grow its buffer only as its bytes arrive, so a peer that declares a
// large frame and sends little costs little.
//
// It is standard library only and imports nothing of the module. It knows
// how frames are cut and bounded, never what a protocol's messages mean.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// ErrTrailing is data after the JSON value.
var ErrTrailing = errors.New("trailing data after the JSON value")

// DecodeJSON decodes b into v strictly: an unknown field or anything after
// the value is an error. Callers wrap the error in their own terms.
func DecodeJSON(b []byte, v any) error { return decodeJSON(b, v, true) }

// decodeJSON decodes the one JSON value b holds into v; strict refuses
// fields v does not have. Only JSON white space may follow the value
// (json.Decoder.More alone lets a stray ']' or '}' through).
func decodeJSON(b []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if len(bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n")) > 0 {
		return ErrTrailing
	}
	return nil
}

// ReadN reads exactly n bytes from r. The buffer starts at 64 KiB (or n)
// and doubles only as bytes arrive; reserve, when not nil, is asked for
// each size before the buffer grows to it, and its error ends the read.
// A short read ends with io.ErrUnexpectedEOF.
func ReadN(r io.Reader, n int, reserve func(size int) error) ([]byte, error) {
	size := min(n, 64<<10)
	if reserve != nil {
		if err := reserve(size); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, size)
	for len(b) < n {
		if len(b) == cap(b) {
			size := min(n, 2*cap(b))
			if reserve != nil {
				if err := reserve(size); err != nil {
					return nil, err
				}
			}
			nb := make([]byte, len(b), size)
			copy(nb, b)
			b = nb
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil && len(b) < n {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}
