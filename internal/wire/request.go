package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// RequestError is what is wrong with a JSON request body, in the caller's
// terms: an unknown field is named as such (Field), never reported as
// invalid JSON.
type RequestError struct {
	Field string // set for an unknown field
	Msg   string
}

func (e *RequestError) Error() string { return e.Msg }

// DecodeRequest decodes a request body b strictly into v. What is wrong
// with the JSON itself is a *RequestError; an error a field's own
// UnmarshalJSON returns comes back as it is.
func DecodeRequest(b []byte, v any) error {
	bad := func(format string, args ...any) error { return &RequestError{Msg: fmt.Sprintf(format, args...)} }
	if len(bytes.TrimSpace(b)) == 0 {
		return bad("request body is empty: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
			return bad("request body is not valid JSON: %v", err)
		case errors.As(err, &typ):
			if typ.Field == "" {
				return bad("request body: want a JSON object, not %s", typ.Value)
			}
			return bad("field %s: %s is not %s", typ.Field, typ.Value, jsonKind(typ.Type.Kind().String()))
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			name = strings.Trim(name, `"`)
			return &RequestError{Field: name, Msg: fmt.Sprintf("unknown field %q", name)}
		}
		return err
	}
	if dec.More() {
		return bad("request body has data after the JSON object")
	}
	return nil
}

// jsonKind names a Go kind as the JSON type a caller should send.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice", kind == "array":
		return "an array"
	}
	return "an object"
}
