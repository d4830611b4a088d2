package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestQwen3NextSessions: Qwen3-Next's sessions run isolated (the DeltaNet
// needs every sequence of a graph to bring as many positions); its
// recurrent state cannot go back but to position 0, and says so; a replay
// from 0 recomputes the state: the same logits bit for bit. The memory a
// session takes counts the recurrent state with the KV.
func TestQwen3NextSessions(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3next", "tiny", "f32"), Options{Slots: 2, Context: 256})
	if !m.Options().Isolated {
		t.Fatal("qwen3next sessions not isolated")
	}
	if NoRewind("qwen3next") == "" || NoRewind(m.Tokenizer().Arch()) == "" {
		t.Errorf("qwen3next said to rewind (tokenizer's arch %q)", m.Tokenizer().Arch())
	}
	// tiny: 4 layers, KV of 2 heads of 16 at the most, 256 cells, f16; a
	// DeltaNet state of 3 inputs of 128 channels and 4 heads of 16x16, f32
	lay := qwen3nextLayouts["tiny"]
	state := int64((lay.conv-1)*(2*lay.kHeads*lay.headDim+lay.vHeads*lay.headDim) + lay.headDim*lay.headDim*lay.vHeads)
	if kv, want := m.Memory().KVPerSession, int64(4*256*2*(16+16)*2)+4*4*state; kv != want {
		t.Errorf("KV per session %d bytes, want %d", kv, want)
	}
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := m.Info().Layers
	run := func() [][]float32 {
		var out [][]float32
		in := splitPrompt
		for range 4 {
			l, err := s.RunRange(context.Background(), 0, n, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
			in = []int32{Greedy(l)}
		}
		return out
	}
	first := run()
	err = s.Truncate(6)
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "recurrent state") {
		t.Errorf("truncate a recurrent state to 6: %v, want an error naming it", err)
	}
	if s.Pos() != len(splitPrompt)+3 {
		t.Errorf("a refused truncate moved the session to %d", s.Pos())
	}
	if err := s.Truncate(0); err != nil {
		t.Fatal(err)
	}
	again := run()
	for i := range first {
		if !bitEqual(first[i], again[i]) {
			t.Errorf("step %d: a replay from 0 differs (max |d| %g)", i, maxAbsDiff(first[i], again[i]))
		}
	}
}

// TestQwen3NextSlices: every stage slice of a Qwen3-Next model loads
// through ollama's loader (qwen3next has no Validate), holding its layers,
// the embedding in the first and the head in the last; a file that lacks
// a tensor of a layer it holds, or the embedding or head its ends need, is
// refused naming the tensors, rather than crash at its first step.
func TestQwen3NextSlices(t *testing.T) {
	full := synthFile(t, "qwen3next", "tiny", "f32")
	checkSlices(t, full, []sliceHole{
		{1, 3, []string{"blk.2.ssm_a"}, "blk.2.ssm_a"},
		{1, 3, []string{"blk.1.attn_q_norm.weight", "blk.2.ffn_up_exps.weight"}, "blk.1.attn_q_norm.weight, blk.2.ffn_up_exps.weight"},
		{0, 2, []string{"blk.0.ssm_ba.weight"}, "blk.0.ssm_ba.weight"},
		{0, 2, []string{"token_embd.weight"}, "token_embd.weight"},
		{2, 4, []string{"output_norm.weight"}, "output_norm.weight"},
		{0, 4, []string{"blk.3.post_attention_norm.weight"}, "blk.3.post_attention_norm.weight"},
	})
}

// TestQwen3NextShape: the 80b shape has Qwen3-Next-80B-A3B's parameters as
// its model card counts them: about 80B in all, about 3B active per token
// (attention or DeltaNet, the router, ten routed experts and the shared
// one; the embedding and head aside), one layer in four gated attention.
func TestQwen3NextShape(t *testing.T) {
	s, m, lay := synthShapes["qwen3next"]["80b"], synthExperts["qwen3next"]["80b"], qwen3nextLayouts["80b"]
	q, kv := s.heads*s.headDim, s.kvHeads*s.headDim
	attn := s.hidden*2*q + 2*s.hidden*kv + q*s.hidden
	inner := lay.vHeads * lay.headDim
	delta := s.hidden*(2*lay.kHeads*lay.headDim+inner) + s.hidden*inner + s.hidden*2*lay.vHeads + inner*s.hidden
	expert := 3 * s.hidden * m.expertFFN
	shared := 3*s.hidden*lay.shared + s.hidden
	var active, total float64
	attnLayers := 0
	for l := range s.layers {
		op := delta
		if qwen3nextAttn("80b", l) {
			op = attn
			attnLayers++
		}
		active += float64(op + s.hidden*m.experts + expert*m.used + shared)
		total += float64(op + s.hidden*m.experts + expert*m.experts + shared)
	}
	total += float64(2 * s.vocab * s.hidden)
	if active < 3e9 || active > 3.5e9 {
		t.Errorf("%.4g active parameters, want about 3B", active)
	}
	if total < 79e9 || total > 81e9 {
		t.Errorf("%.4g parameters, want about 80B", total)
	}
	if attnLayers != 12 || m.experts != 512 || m.used != 10 || s.tied {
		t.Errorf("Qwen3-Next-80B-A3B: 12 attention layers of 48, 512 experts, 10 per token, its own head; have %d, %+v, tied %v", attnLayers, m, s.tied)
	}
}

// TestQwen3NextLongPrompt: a prompt longer than the DeltaNet's 64-position
// chunks (its prefill loops over chunks, carrying the state) and the
// decode steps after it give model.Forward's logits bit for bit.
func TestQwen3NextLongPrompt(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3next", "tiny", "f32"), Options{Context: 256, PrefillChunk: 256, Batch: 256})
	in := make([]int32, 150)
	for i := range in {
		in[i] = int32(7 + i*13%500)
	}
	matchForward(t, m, in, 4)
}
