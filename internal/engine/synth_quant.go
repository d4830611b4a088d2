package engine

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	fsggml "github.com/ollama/ollama/fs/ggml"
)

// Quantized synthetic weights are written as random blocks directly, not
// drawn as floats and quantized: ggml's quantizer takes minutes for an 8B
// model on two cores, while random blocks cost little more than the disk.
//
// Every quant is drawn sign-and-magnitude (a sign bit, then a magnitude
// uniform over the bits left), so the dequantized weights are symmetric
// around zero with mean exactly zero, and the block scales are chosen so
// that their standard deviation is the std the float path draws with.
//
// Layouts as in ggml-common.h: Q8_0 is f16 d then 32 int8 (x = d*q); Q4_K
// is f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of
// 4-bit quants (x = d*sc*q - dmin*m, 8 sub-blocks of 32); Q6_K is 128 bytes
// of low 4 bits, 64 of high 2 bits, 16 int8 scales and f16 d
// (x = d*sc*(q-32), 16 sub-blocks of 16).

const (
	// q8Var is E[q^2] of a sign-and-magnitude int8 (magnitude 0..127).
	q8Var = 127 * 128 * 255 / 6 / 128.0
	// q4Var is E[(q-8)^2] of a sign-and-magnitude nibble (magnitude 0..7).
	q4Var = 7 * 8 * 15 / 6 / 8.0
	// q6Var is E[(q-32)^2] of a sign-and-magnitude 6-bit quant (magnitude 0..31).
	q6Var = 31 * 32 * 63 / 6 / 32.0
	// scVar is E[sc^2] of the K-quant sub-block scales, uniform in 32..63:
	// the scales vary as a real model's do, within 6 bits.
	scVar = (63*64*127 - 31*32*63) / 6 / 32.0
)

// Tables mapping random bits to sign-and-magnitude quants.
var (
	q8Table [256]byte // a byte to an int8
	q4Table [256]byte // a byte to two nibbles, each 8 +/- magnitude
	q6Table [64]byte  // 6 bits to 32 +/- magnitude
)

func init() {
	sm := func(b, bits int) int { // sign-and-magnitude: the top bit is the sign
		m := b & (1<<(bits-1) - 1)
		if b>>(bits-1) != 0 {
			return -m
		}
		return m
	}
	for b := range 256 {
		q8Table[b] = byte(int8(sm(b, 8)))
		q4Table[b] = byte(8+sm(b&15, 4)) | byte(8+sm(b>>4, 4))<<4
	}
	for b := range 64 {
		q6Table[b] = byte(32 + sm(b, 6))
	}
}

// directBlock returns the values per block, the bytes per block and the
// per-block scale d for weights of standard deviation std in typ; ok is
// false for types written through the float path.
func directBlock(typ fsggml.TensorType, std float64) (values, size int, d uint16, ok bool) {
	switch typ {
	case fsggml.TensorTypeQ8_0:
		return 32, 34, F32ToF16(float32(std / math.Sqrt(q8Var))), true
	case fsggml.TensorTypeQ4_K:
		return 256, 144, F32ToF16(float32(std / math.Sqrt(scVar*q4Var))), true
	case fsggml.TensorTypeQ6_K:
		return 256, 210, F32ToF16(float32(std / math.Sqrt(scVar*q6Var))), true
	}
	return 0, 0, 0, false
}

// writeDirect writes n weights of std in typ as random blocks drawn from r,
// a chunk at a time.
func writeDirect(w io.Writer, typ fsggml.TensorType, n int, std float64, r *rand.Rand) (int64, error) {
	values, size, d, ok := directBlock(typ, std)
	if !ok {
		return 0, fmt.Errorf("engine: synth: no direct blocks for %v", typ)
	}
	if n%values != 0 {
		return 0, fmt.Errorf("engine: synth: %d values are not whole %v blocks", n, typ)
	}
	blocks := n / values
	per := max(1, (1<<20)/size) // about 1 MiB a write
	buf := make([]byte, min(per, blocks)*size)
	var rnd [256]byte
	fill := func(b []byte) { // len(b) is a multiple of 8
		for i := 0; i < len(b); i += 8 {
			u := r.Uint64()
			b[i], b[i+1], b[i+2], b[i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			b[i+4], b[i+5], b[i+6], b[i+7] = byte(u>>32), byte(u>>40), byte(u>>48), byte(u>>56)
		}
	}
	dmin := F32ToF16(8 * F16ToF32(d)) // Q4_K: exact, a power of two
	var wrote int64
	for blocks > 0 {
		k := min(per, blocks)
		for i := range k {
			b := buf[i*size : (i+1)*size]
			switch typ {
			case fsggml.TensorTypeQ8_0:
				b[0], b[1] = byte(d), byte(d>>8)
				fill(b[2:34])
				for j := 2; j < 34; j++ {
					b[j] = q8Table[b[j]]
				}
			case fsggml.TensorTypeQ4_K:
				b[0], b[1], b[2], b[3] = byte(d), byte(d>>8), byte(dmin), byte(dmin>>8)
				packQ4KScales(b[4:16], r.Uint64())
				fill(b[16:144])
				for j := 16; j < 144; j++ {
					b[j] = q4Table[b[j]]
				}
			case fsggml.TensorTypeQ6_K:
				fill(rnd[:])
				packQ6K(b, &rnd)
				u := r.Uint64() // 5 bits a scale, 12 scales a draw
				for j := range 16 {
					if j == 12 {
						u = r.Uint64()
					}
					b[192+j] = byte(32 + (u>>(5*(j%12)))&31)
				}
				b[208], b[209] = byte(d), byte(d>>8)
			}
		}
		n, err := w.Write(buf[:k*size])
		wrote += int64(n)
		if err != nil {
			return wrote, err
		}
		blocks -= k
	}
	return wrote, nil
}

// packQ4KScales packs 8 sub-block scales sc in 32..63, from 5 bits of u
// each, with mins m = sc: with dmin = 8*d, x = d*sc*(q-8).
func packQ4KScales(s []byte, u uint64) {
	clear(s)
	for j := range 8 {
		sc := byte(32 + (u>>(5*j))&31)
		if j < 4 {
			s[j] |= sc & 63
			s[j+4] |= sc & 63
		} else {
			s[j+4] = sc&15 | (sc&15)<<4
			s[j-4] |= (sc >> 4) << 6
			s[j] |= (sc >> 4) << 6
		}
	}
}

// packQ6K packs 256 6-bit quants, one from each of rnd's bytes, into the
// ql and qh of a Q6_K block. The quants are independent, so which byte
// lands where does not matter, only that each is a quant.
func packQ6K(b []byte, rnd *[256]byte) {
	ql, qh := b[:128], b[128:192]
	for h := range 2 { // two halves of 128 values
		r := rnd[128*h:]
		for l := range 32 {
			q1, q2, q3, q4 := q6Table[r[l]&63], q6Table[r[l+32]&63], q6Table[r[l+64]&63], q6Table[r[l+96]&63]
			ql[64*h+l] = q1&15 | (q3&15)<<4
			ql[64*h+l+32] = q2&15 | (q4&15)<<4
			qh[32*h+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
		}
	}
}

// writeQ8_0 quantizes f to Q8_0 as ggml's reference quantizer does
// (quantize_row_q8_0_ref: d = max|x|/127, q = round(x/d)) and writes it.
func writeQ8_0(w io.Writer, f []float32) (int64, error) {
	if len(f)%32 != 0 {
		return 0, fmt.Errorf("engine: q8_0 of %d values, not whole blocks of 32", len(f))
	}
	out := make([]byte, 0, len(f)/32*34)
	for b := 0; b < len(f); b += 32 {
		amax := float32(0)
		for _, x := range f[b : b+32] {
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		d := amax / 127
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		h := F32ToF16(d)
		out = append(out, byte(h), byte(h>>8))
		for _, x := range f[b : b+32] {
			out = append(out, byte(int8(math.Round(float64(x*id)))))
		}
	}
	n, err := w.Write(out)
	return int64(n), err
}
