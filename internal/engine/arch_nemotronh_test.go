package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// TestNemotronHSessions: Nemotron-H's sessions run isolated (ollama runs
// one sequence per graph); its recurrent state cannot go back but to
// position 0, and says so; a replay from 0 recomputes the state: the same
// logits bit for bit. The memory a session takes counts the Mamba-2
// layers' convolution and SSM states with the KV. nemotron_h_moe's the same.
func TestNemotronHSessions(t *testing.T) {
	for _, arch := range []string{"nemotron_h", "nemotron_h_moe"} {
		t.Run(arch, func(t *testing.T) { nemotronhSessions(t, arch) })
	}
}

func nemotronhSessions(t *testing.T, arch string) {
	m := loadT(t, synthFile(t, arch, "tiny", "f32"), Options{Slots: 2, Context: 256})
	if !m.Options().Isolated {
		t.Fatal("nemotron_h sessions not isolated")
	}
	if NoRewind(arch) == "" || NoRewind(m.Tokenizer().Arch()) == "" {
		t.Errorf("nemotron_h said to rewind (tokenizer's arch %q)", m.Tokenizer().Arch())
	}
	// tiny: 4 layers, KV of 2 heads of 16 at the most, 256 cells, f16; a
	// Mamba-2 state of 3 inputs of 192 channels (x, B and C) and 8 heads
	// of 16x16, f32
	lay := nemotronhLayouts["tiny"]
	state := int64((lay.kernel-1)*(lay.inner+2*lay.groups*lay.state) + lay.state*lay.inner)
	if kv, want := m.Memory().KVPerSession, int64(4*256*2*(16+16)*2)+4*4*state; kv != want {
		t.Errorf("KV per session %d bytes, want %d", kv, want)
	}
	if est, _, err := Estimate(synthFile(t, arch, "tiny", "f32"), Options{Slots: 2, Context: 256}); err != nil || est.KVPerSession != m.Memory().KVPerSession {
		t.Errorf("estimated KV per session %d (%v), loaded %d", est.KVPerSession, err, m.Memory().KVPerSession)
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

// TestNemotronHSlices: every stage slice of a Nemotron-H model loads
// through ollama's loader (nemotronh has no Validate), holding its layers,
// the embedding in the first and the head in the last; a file that lacks
// a tensor of a layer it holds, or the embedding or head its ends need, is
// refused naming the tensors, rather than crash at its first step.
// (tiny: Mamba-2, attention, Mamba-2, feed-forward.)
func TestNemotronHSlices(t *testing.T) {
	full := synthFile(t, "nemotron_h", "tiny", "f32")
	checkSlices(t, full, []sliceHole{
		{1, 3, []string{"blk.2.ssm_a"}, "blk.2.ssm_a"},
		{1, 3, []string{"blk.1.attn_k.weight", "blk.2.ssm_in.weight"}, "blk.1.attn_k.weight, blk.2.ssm_in.weight"},
		{0, 2, []string{"blk.0.ssm_dt.bias"}, "blk.0.ssm_dt.bias"},
		{2, 4, []string{"blk.2.ssm_conv1d.weight"}, "blk.2.ssm_conv1d.weight"},
		{0, 2, []string{"token_embd.weight"}, "token_embd.weight"},
		{2, 4, []string{"output_norm.weight"}, "output_norm.weight"},
		{0, 4, []string{"blk.3.ffn_down.weight"}, "blk.3.ffn_down.weight"},
		{0, 4, []string{"blk.1.attn_norm.weight"}, "blk.1.attn_norm.weight"},
	})
	// nemotron_h_moe: its last layer experts
	checkSlices(t, synthFile(t, "nemotron_h_moe", "tiny", "f32"), []sliceHole{
		{2, 4, []string{"blk.3.ffn_gate_inp.weight", "blk.3.ffn_down_exps.weight"}, "blk.3.ffn_gate_inp.weight, blk.3.ffn_down_exps.weight"},
		{3, 4, []string{"blk.3.ffn_up_exps.weight"}, "blk.3.ffn_up_exps.weight"},
	})
}

// TestNemotronHLongPrompt: a prompt of many positions (the Mamba-2 scan
// and convolution over all of them at once) and the decode steps after
// it give model.Forward's logits bit for bit.
func TestNemotronHLongPrompt(t *testing.T) {
	m := loadT(t, synthFile(t, "nemotron_h", "tiny", "f32"), Options{Context: 256, PrefillChunk: 256, Batch: 256})
	in := make([]int32, 150)
	for i := range in {
		in[i] = int32(7 + i*13%500)
	}
	matchForward(t, m, in, 4)
}

// TestNemotronHBadHeader: a Nemotron-H file whose SSM heads or groups do
// not split the inner size (ollama would reshape by them) is refused at
// load naming the keys.
func TestNemotronHBadHeader(t *testing.T) {
	full := synthFile(t, "nemotron_h", "tiny", "f32")
	set := func(key string, v any) func(g *shards.GGUF) {
		return func(g *shards.GGUF) {
			for i := range g.KVs {
				if g.KVs[i].Key == key {
					g.KVs[i].Value = v
				}
			}
		}
	}
	for name, c := range map[string]struct {
		edit func(g *shards.GGUF)
		is   error
		want string
	}{
		"heads":   {set("nemotron_h.ssm.time_step_rank", uint32(3)), ErrNotGGUF, "ssm.time_step_rank 3"},
		"noheads": {set("nemotron_h.ssm.time_step_rank", uint32(0)), ErrNotGGUF, "ssm.time_step_rank 0"},
		"groups":  {set("nemotron_h.ssm.group_count", uint32(0)), ErrNotGGUF, "ssm.group_count 0"},
	} {
		p := filepath.Join(t.TempDir(), name+".gguf")
		rewriteHeader(t, full, p, c.edit)
		_, err := Load(context.Background(), p, Options{Threads: 1})
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v naming %q", name, err, c.is, c.want)
		}
	}
}

// TestNemotronHShape: every shape's pattern names each of its layers; the
// 8b shape has Nemotron-H-8B-Base-8K's parameters, about 8.1B with the
// embedding and head, and its layers: 24 Mamba-2, 4 attention, 24
// feed-forward.
func TestNemotronHShape(t *testing.T) {
	for size, lay := range nemotronhLayouts {
		if s := synthShapes["nemotron_h"][size]; len(lay.pattern) != s.layers || strings.Trim(lay.pattern, "M*-") != "" {
			t.Errorf("%s: pattern %q for %d layers", size, lay.pattern, s.layers)
		}
	}
	s, lay := synthShapes["nemotron_h"]["8b"], nemotronhLayouts["8b"]
	channels := lay.inner + 2*lay.groups*lay.state
	mamba := s.hidden*(channels+lay.inner+lay.heads) + lay.kernel*channels + channels + 3*lay.heads + lay.inner + lay.inner*s.hidden
	attn := 2*s.hidden*s.heads*s.headDim + 2*s.hidden*s.kvHeads*s.headDim
	ffn := 2 * s.hidden * s.ffn
	total := float64(2 * s.vocab * s.hidden)
	kinds := map[rune]int{}
	for _, c := range lay.pattern {
		kinds[c]++
		total += float64(s.hidden + map[rune]int{'M': mamba, '*': attn, '-': ffn}[c])
	}
	if total < 8.0e9 || total > 8.2e9 {
		t.Errorf("%.4g parameters, want about 8.1B", total)
	}
	if kinds['M'] != 24 || kinds['*'] != 4 || kinds['-'] != 24 || s.tied || lay.inner != lay.heads*64 {
		t.Errorf("Nemotron-H-8B: 24 Mamba-2, 4 attention, 24 feed-forward layers, SSM heads of 64, its own head; have %v, %+v, tied %v", kinds, lay, s.tied)
	}
}
