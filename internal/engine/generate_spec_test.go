package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// failAfter is a draft whose proposals fail after some.
type failAfter struct {
	SpecModel
	n int
}

func (f *failAfter) Prefill(ctx context.Context, tokens []int32) (int32, Dist, error) {
	if f.n == 0 {
		return -1, Dist{}, errors.New("the draft's device went away")
	}
	f.n--
	return f.SpecModel.Prefill(ctx, tokens)
}

// Generate with a draft gives the answer it gives without one: greedy,
// the same tokens (f32: no rounding apart) in fewer steps; sampling, the
// same tokens for the same seed run after run. A draft that fails midway
// is dropped and the answer goes on plainly, still the same. The draft
// length is held at 4 for that; chosen by cost (how much it drafts then
// depends on measured times: TestSpecCost), the answer is the same too.
func TestGenerateWithDraft(t *testing.T) {
	m := loadT(t, synthFile(t, "llama", "tiny", "f32"), Options{Slots: 2, Context: 256})
	k := 4
	gen := func(s SamplerOptions, draft func(*Session) SpecModel) Result {
		t.Helper()
		req := Request{Prompt: "the swarm drafts", MaxTokens: 40, Sampling: s, DraftMin: k, DraftMax: k}
		if draft != nil {
			ds, err := m.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer ds.Close()
			req.Draft = draft(ds)
		}
		var seen []int32
		res, err := m.Generate(t.Context(), req, func(tok Token) error {
			if tok.ID >= 0 {
				seen = append(seen, tok.ID)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seen, res.Tokens[:len(seen)]) || len(res.Tokens)-len(seen) > 1 {
			t.Fatalf("streamed %v, result %v", seen, res.Tokens)
		}
		return res
	}
	greedy := SamplerOptions{}
	plain := gen(greedy, nil)
	same := gen(greedy, func(s *Session) SpecModel { return SessionDraft(s, greedy) })
	if !slices.Equal(plain.Tokens, same.Tokens) || plain.Text != same.Text {
		t.Fatalf("drafted %q %v\nplain %q %v", same.Text, same.Tokens, plain.Text, plain.Tokens)
	}
	if same.DraftRounds == 0 || same.DraftAccepted*10 < same.Drafted*9 || same.DraftRounds*2 > len(same.Tokens) || same.DraftError != "" {
		t.Fatalf("the model drafting for itself: %d of %d accepted in %d rounds for %d tokens (%s)", same.DraftAccepted,
			same.Drafted, same.DraftRounds, len(same.Tokens), same.DraftError)
	}
	failing := gen(greedy, func(s *Session) SpecModel { return &failAfter{SpecModel: SessionDraft(s, greedy), n: 7} })
	if !slices.Equal(plain.Tokens, failing.Tokens) || failing.DraftError == "" || failing.Drafted == 0 || failing.Drafted >= 7 {
		t.Fatalf("a draft failing after 7 proposals: %v (%d drafted, error %q)\nplain %v", failing.Tokens, failing.Drafted,
			failing.DraftError, plain.Tokens)
	}
	hot := SamplerOptions{Temperature: 0.9, TopK: 20, Seed: 3}
	colder := SamplerOptions{Temperature: 0.5, TopK: 5, Seed: 9}
	a := gen(hot, func(s *Session) SpecModel { return SessionDraft(s, colder) })
	b := gen(hot, func(s *Session) SpecModel { return SessionDraft(s, colder) })
	if !slices.Equal(a.Tokens, b.Tokens) || a.DraftRounds == 0 || a.DraftAccepted == 0 {
		t.Fatalf("sampled with a draft, the same seed twice: %v, %v (%d of %d accepted)", a.Tokens, b.Tokens,
			a.DraftAccepted, a.Drafted)
	}
	k = 0
	byCost := gen(greedy, func(s *Session) SpecModel { return SessionDraft(s, greedy) })
	if !slices.Equal(plain.Tokens, byCost.Tokens) { // how much it drafts depends on measured times
		t.Fatalf("by cost: %v\nplain %v", byCost.Tokens, plain.Tokens)
	}
	t.Logf("greedy: %d of %d accepted in %d rounds; sampled: %d of %d in %d; by cost: %d proposals", same.DraftAccepted,
		same.Drafted, same.DraftRounds, a.DraftAccepted, a.Drafted, a.DraftRounds, byCost.Drafted)
}
