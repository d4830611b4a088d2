package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// A Codec is one stream protocol's framing; every stream protocol of the
// swarm frames through one. A frame is the uvarint length of what follows
// it, then, in a typed codec, one type byte (counted in the length), then
// the body: binary, or one JSON value. The protocols differ only in their
// Codec's fields and in the limit each read is given:
//
//	/swarm/moa, /swarm/draft  untyped, strict JSON, 1 MiB
//	/swarm/shards             untyped, JSON that may carry unknown fields, 64 KiB
//	/swarm/stage              typed 1..7, binary or strict JSON, limit by what comes next
//	/swarm/verify             typed 1..3, binary or strict JSON, limit by what comes next
type Codec struct {
	// Types makes the codec typed: Types[t] is the longest frame (its
	// length, type byte included) of type t. A type with 0 there, or past
	// the end, is unknown.
	Types []uint64
	// UnknownFields lets a JSON body carry fields the value it is decoded
	// into does not have (they are ignored), so that a later minor version
	// may add some.
	UnknownFields bool
	// Err is the sentinel every malformed frame's error wraps: the
	// protocol's own.
	Err error
}

// NoLimit is a limit that bounds nothing.
const NoLimit = math.MaxUint64

// smallWrite is the largest body written in one Write with its header (a
// token or a request is one message on the stream); a larger body is
// written on its own after the header, not copied.
const smallWrite = 64 << 10

func (c *Codec) typed() bool { return c.Types != nil }

// length is the length prefix of a frame with a body of n bytes.
func (c *Codec) length(n int) uint64 {
	if c.typed() {
		return uint64(n) + 1
	}
	return uint64(n)
}

// Size is the bytes a frame with a body of n bytes takes on the wire.
func (c *Codec) Size(n int) int {
	l := c.length(n)
	return uvarintLen(l) + int(l)
}

// Write writes one frame: of type typ (0 in an untyped codec) with body.
func (c *Codec) Write(w io.Writer, typ byte, body []byte) error {
	size := binary.MaxVarintLen64 + 1
	if len(body) <= smallWrite {
		size += len(body)
	}
	hdr := binary.AppendUvarint(make([]byte, 0, size), c.length(len(body)))
	if c.typed() {
		hdr = append(hdr, typ)
	}
	if len(body) <= smallWrite {
		_, err := w.Write(append(hdr, body...))
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// WriteJSON writes v as one frame with a JSON body. A frame longer than
// limit is refused (the peer would refuse it) and nothing is written.
func (c *Codec) WriteJSON(w io.Writer, typ byte, v any, limit uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if n := c.length(len(b)); n > limit {
		return fmt.Errorf("%w: frame of %d bytes (at most %d)", c.Err, n, limit)
	}
	return c.Write(w, typ, b)
}

// Read reads one frame whose length is at most limit and returns its type
// (0 in an untyped codec) and body. The body's buffer grows only as its
// bytes arrive, so a peer that declares a large frame and sends little
// costs little; reserve, when not nil, is asked for each size the buffer
// grows to (given n, the body's declared length) before it grows, and its
// error ends the read as it is.
//
// Read takes no byte past the frame: from a reader without ReadByte (a
// raw stream whose next bytes are no frame) it reads the length and type
// a byte at a time.
//
// A stream that ends before the frame's first byte is io.EOF; one that
// ends inside the frame is io.ErrUnexpectedEOF (a cut stream, not proof of
// a malformed frame); a frame that breaks the limits is an error wrapping
// Err; any other read error is returned as it is.
func (c *Codec) Read(r io.Reader, limit uint64, reserve func(n, size int) error) (byte, []byte, error) {
	limit = min(limit, math.MaxInt)
	br, ok := r.(io.ByteReader)
	if !ok {
		br = byteReader{r}
	}
	n, err := c.readLength(br, limit)
	if err != nil {
		return 0, nil, err
	}
	if n == 0 || n > limit {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes (at most %d expected here)", c.Err, n, limit)
	}
	var typ byte
	if c.typed() {
		if typ, err = br.ReadByte(); err != nil {
			return 0, nil, inside(err)
		}
		if int(typ) >= len(c.Types) || c.Types[typ] == 0 {
			return 0, nil, fmt.Errorf("%w: unknown frame type %d", c.Err, typ)
		}
		if n > c.Types[typ] {
			return 0, nil, fmt.Errorf("%w: frame of type %d of %d bytes (at most %d)", c.Err, typ, n, c.Types[typ])
		}
		n--
	}
	var grow func(size int) error
	if reserve != nil {
		grow = func(size int) error { return reserve(int(n), size) }
	}
	body, err := readN(r, int(n), grow)
	if err != nil {
		return 0, nil, err
	}
	return typ, body, nil
}

// readLength reads a frame's length prefix: no longer than limit's own
// (longer, the length is beyond limit or padded).
func (c *Codec) readLength(r io.ByteReader, limit uint64) (uint64, error) {
	most := uvarintLen(limit)
	var n uint64
	for i := 0; i < most; i++ {
		b, err := r.ReadByte()
		if err != nil {
			if i == 0 {
				return 0, err
			}
			return 0, inside(err)
		}
		n |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: length prefix longer than %d bytes", c.Err, most)
}

// DecodeJSON decodes a frame's JSON body into v: strictly unless the codec
// takes unknown fields. Errors wrap Err, and only Err: the io.EOF the
// decoder says of a blank body must not read as the stream's end.
func (c *Codec) DecodeJSON(body []byte, v any) error {
	if err := decodeJSON(body, v, !c.UnknownFields); err != nil {
		return fmt.Errorf("%w: %v", c.Err, err)
	}
	return nil
}

// readN reads exactly n bytes from r. The buffer starts at 64 KiB (or n)
// and doubles only as bytes arrive; reserve, when not nil, is asked for
// each size before the buffer grows to it, and its error ends the read.
// A short read ends with io.ErrUnexpectedEOF.
func readN(r io.Reader, n int, reserve func(size int) error) ([]byte, error) {
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

// inside is err met inside a frame: an end of stream there is unexpected.
func inside(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// byteReader reads one byte at a time from a reader that cannot.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var p [1]byte
	if _, err := io.ReadFull(b.r, p[:]); err != nil {
		return 0, err
	}
	return p[0], nil
}

// uvarintLen is the bytes of n's shortest uvarint.
func uvarintLen(n uint64) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}
