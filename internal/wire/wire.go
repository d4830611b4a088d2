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
