package shards

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// Errors from reading GGUF files. Returned errors wrap them and name the file.
var (
	ErrNotGGUF            = errors.New("shards: not a GGUF file")
	ErrTruncated          = errors.New("shards: truncated GGUF file")
	ErrUnsupportedVersion = errors.New("shards: unsupported GGUF version")
	ErrMalformed          = errors.New("shards: malformed GGUF file")
	ErrLayerRange         = errors.New("shards: bad layer range")
)

// Limits on what a GGUF header may declare; beyond them the file is rejected
// rather than trusted (all counts are also bounded by the file's size).
const (
	maxStringLen = 64 << 20
	maxDims      = 4
	maxKVs       = 1 << 20
	maxTensors   = 1 << 20
)

// ValueType is a GGUF metadata value type.
type ValueType uint32

// GGUF metadata value types.
const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

var scalarSize = map[ValueType]int{
	TypeUint8: 1, TypeInt8: 1, TypeUint16: 2, TypeInt16: 2, TypeUint32: 4, TypeInt32: 4,
	TypeFloat32: 4, TypeBool: 1, TypeUint64: 8, TypeInt64: 8, TypeFloat64: 8,
}

// KV is one metadata entry. Value holds uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64 or float64, or for arrays a
// slice of one of those (ArrayType says which).
type KV struct {
	Key       string
	Type      ValueType
	ArrayType ValueType
	Value     any
}

// TensorInfo describes one tensor. Offset is relative to the data section.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64
	Size   uint64 // bytes, from type and shape
}

// GGUF is a parsed GGUF header.
type GGUF struct {
	Version    uint32
	KVs        []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset int64 // absolute offset of the tensor data section
	FileSize   int64
}

// Get returns the metadata value for key.
func (g *GGUF) Get(key string) (any, bool) {
	for _, kv := range g.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// String returns a string value, or "".
func (g *GGUF) String(key string) string {
	v, _ := g.Get(key)
	s, _ := v.(string)
	return s
}

// Uint returns an unsigned (or non-negative signed) integer value, or 0.
func (g *GGUF) Uint(key string) uint64 {
	v, _ := g.Get(key)
	switch x := v.(type) {
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case int8:
		return uint64(max(x, 0))
	case int16:
		return uint64(max(x, 0))
	case int32:
		return uint64(max(x, 0))
	case int64:
		return uint64(max(x, 0))
	}
	return 0
}

// Uints returns an integer value as a list: an array's elements (negative
// ones as 0), a scalar as one element, nil when absent or not integers.
// Keys such as attention.head_count_kv are arrays, one per layer, in
// models whose layers differ (LFM2, Nemotron-H, Qwen3-Next).
func (g *GGUF) Uints(key string) []uint64 {
	v, ok := g.Get(key)
	if !ok {
		return nil
	}
	switch x := v.(type) {
	case []uint8:
		return toUints(x)
	case []int8:
		return toUints(x)
	case []uint16:
		return toUints(x)
	case []int16:
		return toUints(x)
	case []uint32:
		return toUints(x)
	case []int32:
		return toUints(x)
	case []uint64:
		return slices.Clone(x)
	case []int64:
		return toUints(x)
	case uint8, uint16, uint32, uint64, int8, int16, int32, int64:
		return []uint64{g.Uint(key)}
	}
	return nil
}

// toUints widens integers, negative ones as 0.
func toUints[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32](xs []T) []uint64 {
	out := make([]uint64, len(xs))
	for i, x := range xs {
		out[i] = uint64(max(x, 0))
	}
	return out
}

// ArrayLen returns the length of an array value, or 0.
func (g *GGUF) ArrayLen(key string) int {
	for _, kv := range g.KVs {
		if kv.Key == key && kv.Type == TypeArray {
			return arrayLen(kv.Value)
		}
	}
	return 0
}

// Tensor returns the tensor named name.
func (g *GGUF) Tensor(name string) (TensorInfo, bool) {
	for _, t := range g.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// reader reads little-endian GGUF fields, bounding every length by the bytes
// left in the file.
type reader struct {
	r    *bufio.Reader
	off  int64
	size int64
	buf  [8]byte
}

func (r *reader) left() int64 { return r.size - r.off }

func (r *reader) read(n int) ([]byte, error) {
	if int64(n) > r.left() {
		return nil, fmt.Errorf("%w: need %d bytes at offset %d, file has %d", ErrTruncated, n, r.off, r.size)
	}
	var b []byte
	if n <= len(r.buf) {
		b = r.buf[:n]
	} else {
		b = make([]byte, n)
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, fmt.Errorf("%w: at offset %d: %v", ErrTruncated, r.off, err)
	}
	r.off += int64(n)
	return b, nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.read(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.read(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a u64 count of items each at least minSize bytes.
func (r *reader) count(what string, minSize, limit int64) (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(limit) {
		return 0, fmt.Errorf("%w: %s count %d over the limit %d", ErrMalformed, what, n, limit)
	}
	if minSize > 0 && n > uint64(r.left()/minSize) {
		return 0, fmt.Errorf("%w: %s count %d does not fit the %d bytes left", ErrTruncated, what, n, r.left())
	}
	return int(n), nil
}

func (r *reader) str() (string, error) {
	n, err := r.count("string length", 1, maxStringLen)
	if err != nil {
		return "", err
	}
	b, err := r.read(n)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func (r *reader) scalar(t ValueType) (any, error) {
	if t == TypeString {
		return r.str()
	}
	sz, ok := scalarSize[t]
	if !ok {
		return nil, fmt.Errorf("%w: value type %d", ErrMalformed, t)
	}
	b, err := r.read(sz)
	if err != nil {
		return nil, err
	}
	switch t {
	case TypeUint8:
		return b[0], nil
	case TypeInt8:
		return int8(b[0]), nil
	case TypeUint16:
		return binary.LittleEndian.Uint16(b), nil
	case TypeInt16:
		return int16(binary.LittleEndian.Uint16(b)), nil
	case TypeUint32:
		return binary.LittleEndian.Uint32(b), nil
	case TypeInt32:
		return int32(binary.LittleEndian.Uint32(b)), nil
	case TypeFloat32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b)), nil
	case TypeBool:
		return b[0] != 0, nil
	case TypeUint64:
		return binary.LittleEndian.Uint64(b), nil
	case TypeInt64:
		return int64(binary.LittleEndian.Uint64(b)), nil
	default: // TypeFloat64
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	}
}

func readArray[T any](r *reader, t ValueType, n int) (any, error) {
	out := make([]T, n)
	for i := range out {
		v, err := r.scalar(t)
		if err != nil {
			return nil, err
		}
		out[i] = v.(T)
	}
	return out, nil
}

func (r *reader) array() (ValueType, any, error) {
	tu, err := r.u32()
	if err != nil {
		return 0, nil, err
	}
	t := ValueType(tu)
	minSize := int64(8) // a string is at least its length
	if t != TypeString {
		sz, ok := scalarSize[t]
		if !ok {
			return 0, nil, fmt.Errorf("%w: array element type %d", ErrMalformed, tu)
		}
		minSize = int64(sz)
	}
	n, err := r.count("array", minSize, math.MaxInt32)
	if err != nil {
		return 0, nil, err
	}
	var v any
	switch t {
	case TypeUint8:
		v, err = readArray[uint8](r, t, n)
	case TypeInt8:
		v, err = readArray[int8](r, t, n)
	case TypeUint16:
		v, err = readArray[uint16](r, t, n)
	case TypeInt16:
		v, err = readArray[int16](r, t, n)
	case TypeUint32:
		v, err = readArray[uint32](r, t, n)
	case TypeInt32:
		v, err = readArray[int32](r, t, n)
	case TypeFloat32:
		v, err = readArray[float32](r, t, n)
	case TypeBool:
		v, err = readArray[bool](r, t, n)
	case TypeString:
		v, err = readArray[string](r, t, n)
	case TypeUint64:
		v, err = readArray[uint64](r, t, n)
	case TypeInt64:
		v, err = readArray[int64](r, t, n)
	case TypeFloat64:
		v, err = readArray[float64](r, t, n)
	}
	return t, v, err
}

// ReadGGUF parses the header of the GGUF held by r (size bytes): metadata,
// tensor infos, alignment and data offset. It checks that every tensor lies
// inside the file. Errors wrap ErrNotGGUF, ErrTruncated,
// ErrUnsupportedVersion or ErrMalformed; garbage input never panics and never
// makes it allocate more than the file's size.
func ReadGGUF(ra io.ReaderAt, size int64) (*GGUF, error) {
	r := &reader{r: bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 1<<16), size: size}
	magic, err := r.read(4)
	if err != nil || string(magic) != "GGUF" {
		return nil, fmt.Errorf("%w: bad magic", ErrNotGGUF)
	}
	g := &GGUF{FileSize: size, Alignment: 32}
	if g.Version, err = r.u32(); err != nil {
		return nil, err
	}
	if g.Version != 2 && g.Version != 3 {
		return nil, fmt.Errorf("%w %d (want 2 or 3)", ErrUnsupportedVersion, g.Version)
	}
	nt, err := r.count("tensor", 24, maxTensors)
	if err != nil {
		return nil, err
	}
	nkv, err := r.count("metadata", 12, maxKVs)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, nkv)
	for range nkv {
		var kv KV
		if kv.Key, err = r.str(); err != nil {
			return nil, err
		}
		if seen[kv.Key] {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrMalformed, kv.Key)
		}
		seen[kv.Key] = true
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		kv.Type = ValueType(t)
		if kv.Type == TypeArray {
			kv.ArrayType, kv.Value, err = r.array()
		} else {
			kv.Value, err = r.scalar(kv.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", kv.Key, err)
		}
		g.KVs = append(g.KVs, kv)
	}
	if v, ok := g.Get("general.alignment"); ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a power of two", ErrMalformed, v)
		}
		g.Alignment = uint64(a)
	}
	names := make(map[string]bool, nt)
	for range nt {
		var ti TensorInfo
		if ti.Name, err = r.str(); err != nil {
			return nil, err
		}
		if names[ti.Name] {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrMalformed, ti.Name)
		}
		names[ti.Name] = true
		nd, err := r.u32()
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > maxDims {
			return nil, fmt.Errorf("%w: tensor %q has %d dimensions", ErrMalformed, ti.Name, nd)
		}
		ti.Dims = make([]uint64, nd)
		for i := range ti.Dims {
			if ti.Dims[i], err = r.u64(); err != nil {
				return nil, err
			}
		}
		tt, err := r.u32()
		if err != nil {
			return nil, err
		}
		ti.Type = GGMLType(tt)
		if ti.Offset, err = r.u64(); err != nil {
			return nil, err
		}
		if ti.Size, err = tensorBytes(ti.Type, ti.Dims); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrMalformed, ti.Name, err)
		}
		if ti.Offset%g.Alignment != 0 {
			return nil, fmt.Errorf("%w: tensor %q offset %d not aligned to %d", ErrMalformed, ti.Name, ti.Offset, g.Alignment)
		}
		g.Tensors = append(g.Tensors, ti)
	}
	g.DataOffset = int64(alignUp(uint64(r.off), g.Alignment))
	for _, t := range g.Tensors {
		end := uint64(g.DataOffset) + t.Offset + t.Size
		if end < t.Offset || end > uint64(size) {
			return nil, fmt.Errorf("%w: tensor %q ends at byte %d, file has %d", ErrTruncated, t.Name, end, size)
		}
	}
	return g, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

func arrayLen(v any) int {
	switch x := v.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	}
	return 0
}

// ReadGGUFFile parses the header of the GGUF file at path. Errors name the file.
func ReadGGUFFile(path string) (*GGUF, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	g, err := ReadGGUF(f, st.Size())
	if err != nil {
		return nil, &fileError{path, err}
	}
	return g, nil
}

// fileError names the file a GGUF error is about.
type fileError struct {
	path string
	err  error
}

func (e *fileError) Error() string {
	return "shards: " + e.path + ": " + strings.TrimPrefix(e.err.Error(), "shards: ")
}
func (e *fileError) Unwrap() error { return e.err }
