package engine

import (
	"context"
	"math"
	"testing"
)

func TestF16Conversion(t *testing.T) {
	// every half value survives half -> float32 -> half
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if got := F32ToF16(f); got != uint16(h) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, f, got)
		}
	}
	cases := []struct {
		f    float32
		want uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {5.960464477539063e-08, 0x0001}, {2.9e-08, 0},
		{1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, // ties to even
		{1.00146484375, 0x3c02}, {6.103515625e-05, 0x0400},
	}
	for _, c := range cases {
		if got := F32ToF16(c.f); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	b := F32ToF16Bytes([]float32{1, -2, 0.5})
	f, err := F16BytesToF32(b)
	if err != nil || len(f) != 3 || f[0] != 1 || f[1] != -2 || f[2] != 0.5 {
		t.Fatalf("round trip %v %v", f, err)
	}
	if _, err := F16BytesToF32([]byte{1, 2, 3}); err == nil {
		t.Fatal("odd length accepted")
	}
}

// TestF16Wire measures what sending hidden states as fp16 between two stages
// costs: max logit difference and greedy token agreement against the fp32
// path (decode steps are teacher-forced with the fp32 tokens).
func TestF16Wire(t *testing.T) {
	for _, arch := range Architectures {
		if WholeOnly(arch) != "" {
			continue // no hidden state crosses between its stages
		}
		m := loadT(t, synthFile(t, arch, "tiny", "f32"), Options{Slots: 3, Context: 256})
		N := m.Info().Layers
		want := wholeTrace(t, m)
		s1, _ := m.NewSession()
		s2, _ := m.NewSession()
		in := splitPrompt
		agree, worst, scale := 0, 0.0, 0.0
		for step := range splitSteps {
			h, err := s1.RunRange(context.Background(), 0, N/2, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			wire := F32ToF16Bytes(h)
			if len(wire) != 2*len(h) {
				t.Fatal("fp16 size")
			}
			h16, err := F16BytesToF32(wire)
			if err != nil {
				t.Fatal(err)
			}
			l, err := s2.RunRange(context.Background(), N/2, N, nil, h16)
			if err != nil {
				t.Fatal(err)
			}
			worst = math.Max(worst, maxAbsDiff(l, want.logits[step]))
			for _, v := range want.logits[step] {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			if Greedy(l) == want.tokens[step] {
				agree++
			}
			in = []int32{want.tokens[step]}
		}
		t.Logf("%s: fp16 hidden states: max |logit diff| %.3g (max |logit| %.3g), greedy tokens agree %d/%d",
			arch, worst, scale, agree, splitSteps)
		if agree < splitSteps*3/4 {
			t.Errorf("%s: fp16 wire changes too many tokens: %d/%d agree", arch, agree, splitSteps)
		}
		s1.Close()
		s2.Close()
	}
}

// FuzzF16Bytes: decoding any bytes and encoding again gives the same bytes
// (NaNs aside, which are canonicalised).
func FuzzF16Bytes(f *testing.F) {
	f.Add([]byte{0, 0x3c, 0xff, 0x7b})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fs, err := F16BytesToF32(b)
		if err != nil {
			if len(b)%2 == 0 {
				t.Fatal(err)
			}
			return
		}
		back := F32ToF16Bytes(fs)
		for i := range fs {
			if math.IsNaN(float64(fs[i])) {
				continue
			}
			if back[2*i] != b[2*i] || back[2*i+1] != b[2*i+1] {
				t.Fatalf("half %d: %x -> %g -> %x", i, b[2*i:2*i+2], fs[i], back[2*i:2*i+2])
			}
		}
	})
}
