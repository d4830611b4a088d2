package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
)

// Options set a training run.
type Options struct {
	Context int     // tokens a window predicts from (the longest prompt it learns)
	Batch   int     // windows a step
	Steps   int     // optimizer steps
	LR      float64 // peak learning rate: 5% of the steps warm up to it, then it falls to a tenth (cosine)
	Seed    uint64  // which windows, in which order
	Workers int     // windows run at once (default 1)
	// Progress, when set, sees each step's mean loss (nats a token).
	Progress func(step int, loss float64)
}

// Train fits m to tokens with Adam (betas 0.9 and 0.95, gradients clipped
// to norm 1), each step on Batch random windows of Context+1 tokens. It
// returns the mean loss of the last tenth of the steps.
func Train(ctx context.Context, m *Model, tokens []int32, o Options) (float64, error) {
	switch {
	case o.Context < 1 || o.Batch < 1 || o.Steps < 1 || o.LR <= 0:
		return 0, fmt.Errorf("train: bad options %+v", o)
	case len(tokens) < o.Context+2:
		return 0, fmt.Errorf("train: %d tokens, fewer than a window of %d", len(tokens), o.Context+1)
	}
	for _, id := range tokens {
		if id < 0 || int(id) >= m.Vocab {
			return 0, fmt.Errorf("train: token %d outside the vocabulary of %d", id, m.Vocab)
		}
	}
	workers := max(1, o.Workers)
	passes := make([]*pass, workers)
	for i := range passes {
		passes[i] = newPass(m, o.Context)
	}
	r := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	var tail []float64
	for step := range o.Steps {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		starts := make([]int, o.Batch)
		for i := range starts {
			starts[i] = r.IntN(len(tokens) - o.Context - 1)
		}
		var wg sync.WaitGroup
		losses := make([]float64, workers)
		counts := make([]int, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(starts); i += workers {
					l, n := passes[w].lossGrad(tokens[starts[i] : starts[i]+o.Context+1])
					losses[w] += l
					counts[w] += n
				}
			}()
		}
		wg.Wait()
		loss, n := 0.0, 0
		for w := range workers {
			loss += losses[w]
			n += counts[w]
		}
		loss /= float64(n)
		m.step(passes, float64(n), lrAt(o, step), step+1)
		if o.Progress != nil {
			o.Progress(step, loss)
		}
		if step >= o.Steps-max(1, o.Steps/10) {
			tail = append(tail, loss)
		}
	}
	sum := 0.0
	for _, l := range tail {
		sum += l
	}
	return sum / float64(len(tail)), nil
}

func lrAt(o Options, step int) float64 {
	warm := max(1, o.Steps/20)
	if step < warm {
		return o.LR * float64(step+1) / float64(warm)
	}
	f := float64(step-warm) / float64(max(1, o.Steps-warm))
	return o.LR * (0.1 + 0.9*0.5*(1+math.Cos(math.Pi*f)))
}

// step sums the passes' gradients (of the loss summed over n predictions),
// clears them, and takes one Adam step.
func (m *Model) step(passes []*pass, n, lr float64, t int) {
	const b1, b2, eps = 0.9, 0.95, 1e-8
	norm := 0.0
	for i, tn := range m.Tensors {
		for j := range tn.g {
			g := 0.0
			for _, p := range passes {
				g += p.grad[i][j]
				p.grad[i][j] = 0
			}
			g /= n
			tn.g[j] = g
			norm += g * g
		}
	}
	clip := 1.0
	if norm = math.Sqrt(norm); norm > 1 {
		clip = 1 / norm
	}
	c1, c2 := 1-math.Pow(b1, float64(t)), 1-math.Pow(b2, float64(t))
	for _, tn := range m.Tensors {
		for j, g := range tn.g {
			g *= clip
			tn.m[j] = b1*tn.m[j] + (1-b1)*g
			tn.v[j] = b2*tn.v[j] + (1-b2)*g*g
			tn.W[j] -= lr * (tn.m[j] / c1) / (math.Sqrt(tn.v[j]/c2) + eps)
		}
	}
}
