// Package train trains a small llama-architecture language model on text,
// in plain Go, so that the engine's tests can run weights that were
// trained rather than drawn at random: a model whose greedy text is English
// shows whether the engine computes what the model's trainer meant, as a
// random one cannot. It is a tool for test fixtures (internal/train/fixture
// writes them), not part of the product: it is slow, single-precision
// free (float64 throughout) and knows one architecture.
//
// The model is the function ollama and llama.cpp compute for a GGUF of
// architecture llama: token embedding; per layer RMSNorm, attention with
// grouped key/value heads and rotary positions on adjacent pairs (ggml's
// "normal" rope) scaled by 1/sqrt(head size), RMSNorm and a SwiGLU
// feed-forward, each added to the residual; a last RMSNorm and the output
// head. Weights are kept as GGUF lays them out: a matrix of GGUF dims
// [in, out] is out rows of in values.
package train

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Shape is a model's size.
type Shape struct {
	Vocab, Hidden, Layers, Heads, KVHeads, FFN int
	RopeBase                                   float64
	Eps                                        float64
}

func (s Shape) headDim() int { return s.Hidden / s.Heads }

func (s Shape) check() error {
	if s.Vocab < 2 || s.Hidden < 2 || s.Layers < 1 || s.Heads < 1 || s.KVHeads < 1 || s.FFN < 1 ||
		s.Hidden%s.Heads != 0 || s.Heads%s.KVHeads != 0 || s.headDim()%2 != 0 || s.RopeBase <= 0 || s.Eps <= 0 {
		return fmt.Errorf("train: bad shape %+v", s)
	}
	return nil
}

// Tensor is one named weight, in GGUF's name and layout.
type Tensor struct {
	Name string
	Dims []int // GGUF order: dims[0] is the row length
	W    []float64
	g    []float64 // gradient
	m, v []float64 // Adam's moments
	idx  int       // place in Model.Tensors
}

// Model is a shape and its weights.
type Model struct {
	Shape
	Tensors []*Tensor
	emb     *Tensor
	outNorm *Tensor
	out     *Tensor
	layers  []layer
}

type layer struct {
	attnNorm, q, k, v, o, ffnNorm, gate, up, down *Tensor
}

// New makes a model of shape s with small random weights (norms at one).
func New(s Shape, seed uint64) (*Model, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m := &Model{Shape: s}
	add := func(name string, std float64, dims ...int) *Tensor {
		n := 1
		for _, d := range dims {
			n *= d
		}
		t := &Tensor{Name: name, Dims: dims, W: make([]float64, n), g: make([]float64, n), m: make([]float64, n), v: make([]float64, n)}
		t.idx = len(m.Tensors)
		for i := range t.W {
			if std == 0 {
				t.W[i] = 1
			} else {
				t.W[i] = std * r.NormFloat64()
			}
		}
		m.Tensors = append(m.Tensors, t)
		return t
	}
	d, hd := s.Hidden, s.headDim()
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	m.emb = add("token_embd.weight", 0.5, d, s.Vocab)
	m.outNorm = add("output_norm.weight", 0, d)
	m.out = add("output.weight", inv(d), d, s.Vocab)
	// Residual branches start small (GPT-2's 1/sqrt(2 layers)), so that a
	// deep stack starts near the identity.
	res := inv(2 * s.Layers)
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		m.layers = append(m.layers, layer{
			attnNorm: add(p+"attn_norm.weight", 0, d),
			q:        add(p+"attn_q.weight", inv(d), d, s.Heads*hd),
			k:        add(p+"attn_k.weight", inv(d), d, s.KVHeads*hd),
			v:        add(p+"attn_v.weight", inv(d), d, s.KVHeads*hd),
			o:        add(p+"attn_output.weight", res*inv(s.Heads*hd), s.Heads*hd, d),
			ffnNorm:  add(p+"ffn_norm.weight", 0, d),
			gate:     add(p+"ffn_gate.weight", inv(d), d, s.FFN),
			up:       add(p+"ffn_up.weight", inv(d), d, s.FFN),
			down:     add(p+"ffn_down.weight", res*inv(s.FFN), s.FFN, d),
		})
	}
	return m, nil
}

// Weights are the model's tensors by GGUF name, in float32.
func (m *Model) Weights() map[string][]float32 {
	out := map[string][]float32{}
	for _, t := range m.Tensors {
		w := make([]float32, len(t.W))
		for i, x := range t.W {
			w[i] = float32(x)
		}
		out[t.Name] = w
	}
	return out
}

// matVec sets y (out) to W x (in) for W of out rows of len(x).
func matVec(y, w, x []float64) {
	in := len(x)
	for o := range y {
		row := w[o*in : o*in+in]
		s := 0.0
		for i, xi := range x {
			s += row[i] * xi
		}
		y[o] = s
	}
}

// matVecBack adds dy's gradient to gw (dy outer x) and to dx (W^T dy).
func matVecBack(dx, gw, w, x, dy []float64) {
	in := len(x)
	for o, g := range dy {
		if g == 0 {
			continue
		}
		row := w[o*in : o*in+in]
		grow := gw[o*in : o*in+in]
		for i, xi := range x {
			grow[i] += g * xi
			dx[i] += g * row[i]
		}
	}
}

// rmsNorm sets y to x / rms(x) * g and returns 1/rms(x).
func rmsNorm(y, x, g []float64, eps float64) float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	for i := range x {
		y[i] = x[i] * r * g[i]
	}
	return r
}

// rmsNormBack adds to dx and gg the gradients of y = rmsNorm(x, g) given dy.
func rmsNormBack(dx, gg, x, g, dy []float64, r float64) {
	n := float64(len(x))
	dot := 0.0
	for i := range x {
		gg[i] += dy[i] * x[i] * r
		dot += dy[i] * g[i] * x[i]
	}
	for i := range x {
		dx[i] += r*dy[i]*g[i] - r*r*r*x[i]*dot/n
	}
}

// rope turns each adjacent pair of every head of v by its position's
// angles (sign -1 turns back: the gradient's rotation).
func rope(v []float64, heads, hd int, cos, sin []float64, sign float64) {
	for h := range heads {
		x := v[h*hd : h*hd+hd]
		for i := 0; i < hd; i += 2 {
			c, s := cos[i/2], sign*sin[i/2]
			a, b := x[i], x[i+1]
			x[i], x[i+1] = a*c-b*s, a*s+b*c
		}
	}
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }
