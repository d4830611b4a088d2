package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
)

// plainGreedy decodes n tokens one position per step, keeping each step's
// logits.
func plainGreedy(t *testing.T, m *Model, prompt []int32, n int) ([]int32, [][]float32) {
	t.Helper()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var toks []int32
	var logits [][]float32
	in := prompt
	for range n {
		l, err := s.RunRange(context.Background(), 0, m.Info().Layers, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, l)
		in = []int32{Greedy(l)}
		toks = append(toks, in[0])
	}
	return toks, logits
}

type specRun struct {
	toks     []int32
	stats    SpecStats
	proposed []int // per round
}

func speculate(t *testing.T, target, draft *Model, prompt []int32, n int, o SpecOptions) specRun {
	t.Helper()
	ts, err := target.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	ds, err := draft.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	var r specRun
	o.MaxTokens = n
	o.OnToken = func(tok int32) bool { r.toks = append(r.toks, tok); return true }
	o.OnRound = func(p, a int) {
		if a > p || a < 0 {
			t.Errorf("round accepted %d of %d", a, p)
		}
		r.proposed = append(r.proposed, p)
	}
	if r.stats, err = Speculate(context.Background(), SessionSpec(ts, SamplerOptions{}), SessionSpec(ds, SamplerOptions{}), prompt, o); err != nil {
		t.Fatal(err)
	}
	if r.stats.Tokens != n || len(r.toks) != n {
		t.Fatalf("%d tokens (%d seen), want %d", r.stats.Tokens, len(r.toks), n)
	}
	if want := len(prompt) + n - 1; ts.Pos() != want {
		t.Fatalf("target session holds %d positions after the answer, want %d (prompt + answer but its last token)", ts.Pos(), want)
	}
	return r
}

// sameAsPlain checks that the speculative tokens are plain greedy's, where
// a divergence may only be at a near tie of plain's logits (a step of
// several positions rounds otherwise than single ones); after one, plain
// greedy is taken again from the speculative answer's prefix.
func sameAsPlain(t *testing.T, m *Model, prompt, got []int32) {
	t.Helper()
	want, logits := plainGreedy(t, m, prompt, len(got))
	for i := 0; i < len(got); i++ {
		if got[i] == want[i] {
			continue
		}
		l := logits[i]
		if gap := float64(l[want[i]] - l[got[i]]); gap > 0.05*maxAbs(l) {
			t.Fatalf("token %d: speculative %d, plain %d, whose logit is higher by %g (max |logit| %g): not a near tie",
				i, got[i], want[i], gap, maxAbs(l))
		}
		t.Logf("token %d: a near tie (%d against %d); plain greedy again from there", i, got[i], want[i])
		prefix := append(append([]int32(nil), prompt...), got[:i+1]...)
		rest, restLogits := plainGreedy(t, m, prefix, len(got)-i-1)
		want = append(want[:i+1:i+1], rest...)
		logits = append(logits[:i+1:i+1], restLogits...)
	}
}

// Speculative greedy decoding gives plain greedy's tokens for each
// architecture, with a draft that agrees (the same model: k grows to its
// bound) and one that rarely does (other weights, same vocabulary: k
// falls to 1).
func TestSpeculateMatchesGreedy(t *testing.T) {
	cases := []struct{ arch, size, typ string }{
		{"qwen3", "small", "q8_0"}, {"qwen2", "small", "q8_0"}, {"llama", "small", "q8_0"},
		{"qwen3", "small", "q4_k"}, {"llama", "tiny", "f32"},
	}
	const n = 40
	for _, c := range cases {
		t.Run(c.arch+"-"+c.typ, func(t *testing.T) {
			m := loadT(t, synthFile(t, c.arch, c.size, c.typ), Options{Slots: 2, Context: 256})
			other := filepath.Join(t.TempDir(), "other.gguf")
			if err := Synth(context.Background(), other, SynthSpec{Arch: c.arch, Size: c.size, Type: c.typ, Seed: 7}); err != nil {
				t.Fatal(err)
			}
			o := loadT(t, other, Options{Slots: 1, Context: 256})
			prompt := splitPrompt[:8]
			agree := speculate(t, m, m, prompt, n, SpecOptions{K: 2, MaxK: 6})
			sameAsPlain(t, m, prompt, agree.toks)
			if agree.stats.Accepted*10 < agree.stats.Proposed*8 {
				t.Fatalf("the model drafting for itself had %d of %d proposals accepted", agree.stats.Accepted, agree.stats.Proposed)
			}
			if maxInt(agree.proposed) != 6 {
				t.Fatalf("an agreeing draft's rounds proposed %v: k never reached MaxK 6", agree.proposed)
			}
			if agree.stats.Rounds*2 > n {
				t.Fatalf("%d target steps for %d tokens with an agreeing draft", agree.stats.Rounds, n)
			}

			apart := speculate(t, m, o, prompt, n, SpecOptions{K: 4, MaxK: 6})
			sameAsPlain(t, m, prompt, apart.toks)
			if apart.stats.Accepted*2 > apart.stats.Proposed {
				t.Fatalf("other weights had %d of %d proposals accepted", apart.stats.Accepted, apart.stats.Proposed)
			}
			if p := apart.proposed; p[len(p)-1] > 2 {
				t.Fatalf("a disagreeing draft's rounds proposed %v: k did not fall", p)
			}
			t.Logf("agreeing draft: %d of %d accepted, %d target steps; other weights: %d of %d, %d steps",
				agree.stats.Accepted, agree.stats.Proposed, agree.stats.Rounds, apart.stats.Accepted, apart.stats.Proposed, apart.stats.Rounds)
		})
	}
}

func maxInt(x []int) int {
	m := 0
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// RunRangeAll's rows are the logits of each position: its last row is
// RunRange's, up to the rounding of a head over several rows.
func TestRunRangeAllRows(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3", "small", "q8_0"), Options{Slots: 3, Context: 64})
	L, V := m.Info().Layers, m.Info().VocabSize
	a, _ := m.NewSession()
	defer a.Close()
	b, _ := m.NewSession()
	defer b.Close()
	all, err := a.RunRangeAll(context.Background(), 0, L, splitPrompt[:5], nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5*V {
		t.Fatalf("%d floats for 5 positions of %d logits", len(all), V)
	}
	last, err := b.RunRange(context.Background(), 0, L, splitPrompt[:5], nil)
	if err != nil {
		t.Fatal(err)
	}
	row := all[4*V:]
	if d := maxAbsDiff(row, last); d > 1e-2*maxAbs(last) {
		t.Fatalf("last row differs from RunRange's logits by %g (max %g)", d, maxAbs(last))
	}
	if a.Pos() != 5 {
		t.Fatalf("session at %d after 5 positions", a.Pos())
	}
	// below the head it is RunRange: hidden states of every position
	c, _ := m.NewSession()
	defer c.Close()
	h, err := c.RunRangeAll(context.Background(), 0, L-1, splitPrompt[:3], nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3*m.Info().Hidden {
		t.Fatalf("%d floats below the head for 3 positions, want %d", len(h), 3*m.Info().Hidden)
	}
}

func TestSpeculateBadInput(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3", "small", "q8_0"), Options{Slots: 2, Context: 64})
	a, _ := m.NewSession()
	defer a.Close()
	b, _ := m.NewSession()
	defer b.Close()
	if _, err := Speculate(context.Background(), SessionSpec(a, SamplerOptions{}), SessionSpec(b, SamplerOptions{}), nil, SpecOptions{}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("empty prompt: %v", err)
	}
	if _, err := a.RunRange(context.Background(), 0, m.Info().Layers, splitPrompt[:2], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Speculate(context.Background(), SessionSpec(a, SamplerOptions{}), SessionSpec(b, SamplerOptions{}), splitPrompt[:2], SpecOptions{}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("a target session holding positions: %v", err)
	}
}

// At the end of the target's context the answer ends with ErrContextFull
// after every token that fits (Context given), and a draft with less room
// stops drafting while the target goes on: the tokens stay plain greedy's.
func TestSpeculateContextFull(t *testing.T) {
	path := synthFile(t, "llama", "tiny", "f32")
	target := loadT(t, path, Options{Slots: 1, Context: 30})
	draft := loadT(t, path, Options{Slots: 1, Context: 20})
	wide := loadT(t, path, Options{Slots: 1, Context: 64})
	prompt := splitPrompt[:8]
	want, _ := plainGreedy(t, wide, prompt, 23)
	for _, known := range []bool{true, false} {
		ts, _ := target.NewSession()
		ds, _ := draft.NewSession()
		var got []int32
		o := SpecOptions{K: 4, MaxTokens: 100, OnToken: func(tok int32) bool { got = append(got, tok); return true }}
		if known {
			o.Context = 30
		}
		st, err := Speculate(context.Background(), SessionSpec(ts, SamplerOptions{}), SessionSpec(ds, SamplerOptions{}), prompt, o)
		ts.Close()
		ds.Close()
		if !errors.Is(err, ErrContextFull) {
			t.Fatalf("context known %v: %v after %d tokens", known, err, len(got))
		}
		if known && len(got) != 23 {
			t.Fatalf("%d tokens before the 30-position context filled, want 23 (22 held, the last not run)", len(got))
		}
		if len(got) < 16 || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("context known %v: %v, plain %v", known, got, want)
		}
		t.Logf("context known %v: %d tokens, %d of %d drafts accepted", known, len(got), st.Accepted, st.Proposed)
	}
}
