package shards

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// WriteGGUF writes a GGUF v3 file: g's metadata and tensor infos, then each
// tensor's data, produced by data(i, w) for g.Tensors[i] in order. Tensor
// offsets are recomputed (aligned to g.Alignment) and stored back in g;
// DataOffset too. data must write exactly Tensors[i].Size bytes.
func WriteGGUF(w io.Writer, g *GGUF, data func(i int, w io.Writer) error) error {
	if g.Alignment == 0 {
		g.Alignment = 32
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countWriter{w: bw}
	var off uint64
	for i := range g.Tensors {
		t := &g.Tensors[i]
		size, err := tensorBytes(t.Type, t.Dims)
		if err != nil {
			return fmt.Errorf("shards: tensor %q: %w", t.Name, err)
		}
		t.Size = size
		t.Offset = off
		off = alignUp(off+size, g.Alignment)
	}
	le := binary.LittleEndian
	cw.write([]byte("GGUF"))
	cw.write(le.AppendUint32(nil, 3))
	cw.write(le.AppendUint64(nil, uint64(len(g.Tensors))))
	cw.write(le.AppendUint64(nil, uint64(len(g.KVs))))
	for _, kv := range g.KVs {
		cw.str(kv.Key)
		cw.write(le.AppendUint32(nil, uint32(kv.Type)))
		if kv.Type == TypeArray {
			if err := cw.array(kv.ArrayType, kv.Value); err != nil {
				return fmt.Errorf("shards: key %q: %w", kv.Key, err)
			}
		} else if err := cw.scalar(kv.Type, kv.Value); err != nil {
			return fmt.Errorf("shards: key %q: %w", kv.Key, err)
		}
	}
	for _, t := range g.Tensors {
		cw.str(t.Name)
		cw.write(le.AppendUint32(nil, uint32(len(t.Dims))))
		for _, d := range t.Dims {
			cw.write(le.AppendUint64(nil, d))
		}
		cw.write(le.AppendUint32(nil, uint32(t.Type)))
		cw.write(le.AppendUint64(nil, t.Offset))
	}
	cw.pad(g.Alignment)
	g.DataOffset = cw.n
	for i, t := range g.Tensors {
		if cw.err != nil {
			break
		}
		before := cw.n
		if err := data(i, cw); err != nil {
			return fmt.Errorf("shards: tensor %q data: %w", t.Name, err)
		}
		if got := uint64(cw.n - before); got != t.Size {
			return fmt.Errorf("shards: tensor %q: wrote %d bytes, want %d", t.Name, got, t.Size)
		}
		if i < len(g.Tensors)-1 {
			cw.pad(g.Alignment)
		}
	}
	if cw.err != nil {
		return fmt.Errorf("shards: writing GGUF: %w", cw.err)
	}
	return bw.Flush()
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

func (c *countWriter) write(p []byte) { _, _ = c.Write(p) }

func (c *countWriter) pad(a uint64) {
	if n := int64(alignUp(uint64(c.n), a)) - c.n; n > 0 {
		c.write(make([]byte, n))
	}
}

func (c *countWriter) str(s string) {
	c.write(binary.LittleEndian.AppendUint64(nil, uint64(len(s))))
	c.write([]byte(s))
}

func (c *countWriter) scalar(t ValueType, v any) error {
	le := binary.LittleEndian
	var b []byte
	switch x := v.(type) {
	case uint8:
		b = []byte{x}
	case int8:
		b = []byte{byte(x)}
	case uint16:
		b = le.AppendUint16(nil, x)
	case int16:
		b = le.AppendUint16(nil, uint16(x))
	case uint32:
		b = le.AppendUint32(nil, x)
	case int32:
		b = le.AppendUint32(nil, uint32(x))
	case float32:
		b = le.AppendUint32(nil, math.Float32bits(x))
	case bool:
		b = []byte{0}
		if x {
			b[0] = 1
		}
	case string:
		if t != TypeString {
			return fmt.Errorf("value %q does not match type %d", x, t)
		}
		c.str(x)
		return nil
	case uint64:
		b = le.AppendUint64(nil, x)
	case int64:
		b = le.AppendUint64(nil, uint64(x))
	case float64:
		b = le.AppendUint64(nil, math.Float64bits(x))
	default:
		return fmt.Errorf("unsupported value %T", v)
	}
	if scalarSize[t] != len(b) {
		return fmt.Errorf("value %T does not match type %d", v, t)
	}
	c.write(b)
	return nil
}

func writeArray[T any](c *countWriter, t ValueType, xs []T) error {
	c.write(binary.LittleEndian.AppendUint32(nil, uint32(t)))
	c.write(binary.LittleEndian.AppendUint64(nil, uint64(len(xs))))
	for _, x := range xs {
		if err := c.scalar(t, x); err != nil {
			return err
		}
	}
	return nil
}

func (c *countWriter) array(t ValueType, v any) error {
	switch x := v.(type) {
	case []uint8:
		return writeArray(c, t, x)
	case []int8:
		return writeArray(c, t, x)
	case []uint16:
		return writeArray(c, t, x)
	case []int16:
		return writeArray(c, t, x)
	case []uint32:
		return writeArray(c, t, x)
	case []int32:
		return writeArray(c, t, x)
	case []float32:
		return writeArray(c, t, x)
	case []bool:
		return writeArray(c, t, x)
	case []string:
		return writeArray(c, t, x)
	case []uint64:
		return writeArray(c, t, x)
	case []int64:
		return writeArray(c, t, x)
	case []float64:
		return writeArray(c, t, x)
	}
	return fmt.Errorf("unsupported array %T", v)
}
