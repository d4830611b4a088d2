package engine

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Hidden states cross the wire as IEEE 754 half precision, little endian:
// 2 bytes per float. Conversion rounds to nearest even; values beyond the
// half range become ±Inf.

// F32ToF16Bytes encodes f as little-endian fp16.
func F32ToF16Bytes(f []float32) []byte {
	return AppendF16(make([]byte, 0, 2*len(f)), f)
}

// AppendF16 appends f as little-endian fp16 to dst.
func AppendF16(dst []byte, f []float32) []byte {
	for _, v := range f {
		dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(v))
	}
	return dst
}

// F16BytesToF32 decodes little-endian fp16. An odd length is an error.
func F16BytesToF32(b []byte) ([]float32, error) {
	if len(b)%2 != 0 {
		return nil, fmt.Errorf("%w: fp16 data has odd length %d", ErrBadInput, len(b))
	}
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out, nil
}

// F32ToF16 converts one float32 to fp16 bits (round to nearest even).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 // NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		full := mant | 0x800000
		shift := uint32(14 - e)
		half := full >> shift
		rem := full & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // a carry into the exponent is still correct (up to Inf)
	}
	return sign | uint16(half)
}

// F16ToF32 converts fp16 bits to float32 (exact).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
