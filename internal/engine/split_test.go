package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
)

const (
	splitPromptLen = 12
	splitSteps     = 17 // prefill + 16 decode steps
)

var splitPrompt = []int32{11, 42, 7, 300, 256, 99, 5, 180, 77, 401, 3, 64}

// chains lists every way to cut [0,n) into k contiguous non-empty stages.
func chains(n, k int) [][][2]int {
	var out [][][2]int
	var rec func(start int, acc [][2]int)
	rec = func(start int, acc [][2]int) {
		if len(acc) == k-1 {
			out = append(out, append(append([][2]int(nil), acc...), [2]int{start, n}))
			return
		}
		for b := start + 1; b <= n-(k-1-len(acc)); b++ {
			rec(b, append(acc, [2]int{start, b}))
		}
	}
	rec(0, nil)
	return out
}

// trace is the monolithic reference: logits and greedy token at each step.
type trace struct {
	logits [][]float32
	tokens []int32
}

func wholeTrace(t *testing.T, m *Model) trace {
	t.Helper()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var tr trace
	in := splitPrompt
	for range splitSteps {
		l, err := s.RunRange(context.Background(), 0, m.Info().Layers, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		id := Greedy(l)
		tr.logits = append(tr.logits, l)
		tr.tokens = append(tr.tokens, id)
		in = []int32{id}
	}
	return tr
}

// runChain runs the stages (stage i on models[i]) step by step, feeding each
// stage's hidden states to the next, and checks every step against want bit
// for bit.
func runChain(t *testing.T, name string, models []*Model, chain [][2]int, want trace) {
	t.Helper()
	sess := make([]*Session, len(chain))
	for i := range chain {
		s, err := models[i].NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sess[i] = s
	}
	in := splitPrompt
	for step := range splitSteps {
		var h []float32
		var err error
		for i, st := range chain {
			if i == 0 {
				h, err = sess[i].RunRange(context.Background(), st[0], st[1], in, nil)
			} else {
				h, err = sess[i].RunRange(context.Background(), st[0], st[1], nil, h)
			}
			if err != nil {
				t.Fatalf("%s step %d stage %v: %v", name, step, st, err)
			}
		}
		if !bitEqual(h, want.logits[step]) {
			t.Fatalf("%s step %d: logits differ from whole model (max |d| %g)", name, step, maxAbsDiff(h, want.logits[step]))
		}
		id := Greedy(h)
		if id != want.tokens[step] {
			t.Fatalf("%s step %d: token %d, whole model %d", name, step, id, want.tokens[step])
		}
		in = []int32{id}
	}
}

func bitEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func distinct(ids []int32) int {
	m := map[int32]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return len(m)
}

// TestSplitMatchesWhole: for every architecture, chaining 2, 3 and 4 RunRange
// stages at every split point gives bit-identical logits and tokens to the
// whole-model forward, over a prompt and 16 decode steps; with every stage on
// the whole file, and with every stage on its own sliced file (each stage a
// model of its own, as each is on its own peer).
func TestSplitMatchesWhole(t *testing.T) {
	for _, arch := range Architectures {
		t.Run(arch, func(t *testing.T) {
			full := synthFile(t, arch, "tiny", "f32")
			whole := loadT(t, full, Options{Slots: 8, Context: 256})
			want := wholeTrace(t, whole)
			if d := distinct(want.tokens); d < 4 {
				t.Fatalf("synthetic model decodes too few distinct tokens (%d): %v", d, want.tokens)
			}
			t.Logf("greedy tokens: %v", want.tokens)
			if WholeOnly(arch) != "" {
				refusesRanges(t, whole, full)
				return
			}
			n := whole.Info().Layers
			sliced := map[[2]int]*Model{}
			for k := 2; k <= 4; k++ {
				for _, ch := range chains(n, k) {
					name := fmt.Sprintf("%d stages %v", k, ch)
					// Each stage on a model of its own, as on its own peer: two
					// sessions of one model share its KV cache, and their
					// cells interleave (TestBatchedSameTokens).
					models := make([]*Model, len(ch))
					for i := range ch {
						models[i] = loadT(t, full, Options{Slots: 2, Context: 256})
					}
					runChain(t, name+" whole files", models, ch, want)
					if !testSlices || unsliceable[arch] != "" {
						continue
					}
					for i, st := range ch {
						if sliced[st] == nil {
							p := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d-%d.gguf", arch, st[0], st[1]))
							sliceFile(t, full, p, st[0], st[1])
							sliced[st] = loadT(t, p, Options{Slots: 2, Context: 256})
						}
						models[i] = sliced[st]
					}
					runChain(t, name+" sliced files", models, ch, want)
					if k == 2 {
						// stage slices hold no second copy of the embedding:
						// together they take what the whole model takes, plus
						// the placeholder head.
						var sum int64
						for _, sm := range models {
							sum += sm.Memory().Weights
						}
						if whole := whole.Memory().Weights; sum > whole+4096 {
							t.Errorf("%s: stages hold %d weight bytes, whole model %d", name, sum, whole)
						}
					}
				}
			}
		})
	}
}
