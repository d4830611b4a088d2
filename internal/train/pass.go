package train

import "math"

// pass holds one sequence's activations for the backward pass, and its
// own gradient of every tensor (index-aligned with Model.Tensors), so that
// sequences run in parallel.
type pass struct {
	m    *Model
	grad [][]float64
	cos  [][]float64 // [position][pair]
	sin  [][]float64
}

func newPass(m *Model, ctx int) *pass {
	p := &pass{m: m}
	for _, t := range m.Tensors {
		p.grad = append(p.grad, make([]float64, len(t.W)))
	}
	hd := m.headDim()
	for pos := range ctx {
		c, s := make([]float64, hd/2), make([]float64, hd/2)
		for i := range hd / 2 {
			theta := float64(pos) * math.Pow(m.RopeBase, -2*float64(i)/float64(hd))
			c[i], s[i] = math.Cos(theta), math.Sin(theta)
		}
		p.cos, p.sin = append(p.cos, c), append(p.sin, s)
	}
	return p
}

func (p *pass) g(t *Tensor) []float64 { return p.grad[t.idx] }

// layerActs are one layer's activations over a sequence.
type layerActs struct {
	x, an, q, k, v, att, x2, fn, gt, up, hh [][]float64
	ra, rf                                  []float64
	p                                       [][][]float64 // [t][head][j<=t]
}

func vecs(n, d int) [][]float64 {
	out := make([][]float64, n)
	for i := range out {
		out[i] = make([]float64, d)
	}
	return out
}

// lossGrad runs ids through the model, each position predicting the next
// id, and adds the gradient of the summed loss to p.grad. It returns the
// summed loss (nats) and the count of predictions.
func (p *pass) lossGrad(ids []int32) (float64, int) {
	m, s := p.m, p.m.Shape
	T := len(ids) - 1
	d, hd, H, KV := s.Hidden, s.headDim(), s.Heads, s.KVHeads
	group := H / KV
	scale := 1 / math.Sqrt(float64(hd))
	x := vecs(T, d)
	for t := range T {
		copy(x[t], m.emb.W[int(ids[t])*d:int(ids[t])*d+d])
	}
	acts := make([]*layerActs, s.Layers)
	for l, L := range m.layers {
		a := &layerActs{x: x, an: vecs(T, d), q: vecs(T, H*hd), k: vecs(T, KV*hd), v: vecs(T, KV*hd), att: vecs(T, H*hd),
			x2: vecs(T, d), fn: vecs(T, d), gt: vecs(T, s.FFN), up: vecs(T, s.FFN), hh: vecs(T, s.FFN),
			ra: make([]float64, T), rf: make([]float64, T), p: make([][][]float64, T)}
		acts[l] = a
		for t := range T {
			a.ra[t] = rmsNorm(a.an[t], x[t], L.attnNorm.W, s.Eps)
			matVec(a.q[t], L.q.W, a.an[t])
			matVec(a.k[t], L.k.W, a.an[t])
			matVec(a.v[t], L.v.W, a.an[t])
			rope(a.q[t], H, hd, p.cos[t], p.sin[t], 1)
			rope(a.k[t], KV, hd, p.cos[t], p.sin[t], 1)
		}
		next := vecs(T, d)
		for t := range T {
			a.p[t] = make([][]float64, H)
			for h := range H {
				kh := h / group
				q := a.q[t][h*hd : h*hd+hd]
				pr := make([]float64, t+1)
				mx := math.Inf(-1)
				for j := 0; j <= t; j++ {
					sc := 0.0
					for i, qi := range q {
						sc += qi * a.k[j][kh*hd+i]
					}
					pr[j] = sc * scale
					mx = max(mx, pr[j])
				}
				sum := 0.0
				for j := range pr {
					pr[j] = math.Exp(pr[j] - mx)
					sum += pr[j]
				}
				o := a.att[t][h*hd : h*hd+hd]
				for j := range pr {
					pr[j] /= sum
					for i := range o {
						o[i] += pr[j] * a.v[j][kh*hd+i]
					}
				}
				a.p[t][h] = pr
			}
			matVec(a.x2[t], L.o.W, a.att[t])
			for i := range d {
				a.x2[t][i] += x[t][i]
			}
			a.rf[t] = rmsNorm(a.fn[t], a.x2[t], L.ffnNorm.W, s.Eps)
			matVec(a.gt[t], L.gate.W, a.fn[t])
			matVec(a.up[t], L.up.W, a.fn[t])
			for i := range s.FFN {
				a.hh[t][i] = silu(a.gt[t][i]) * a.up[t][i]
			}
			matVec(next[t], L.down.W, a.hh[t])
			for i := range d {
				next[t][i] += a.x2[t][i]
			}
		}
		x = next
	}
	// head and loss
	loss := 0.0
	dx := vecs(T, d)
	on := make([]float64, d)
	don := make([]float64, d)
	logits := make([]float64, s.Vocab)
	for t := range T {
		r := rmsNorm(on, x[t], m.outNorm.W, s.Eps)
		matVec(logits, m.out.W, on)
		mx := math.Inf(-1)
		for _, v := range logits {
			mx = max(mx, v)
		}
		sum := 0.0
		for i, v := range logits {
			logits[i] = math.Exp(v - mx)
			sum += logits[i]
		}
		want := int(ids[t+1])
		loss -= math.Log(logits[want] / sum)
		for i := range logits {
			logits[i] /= sum
		}
		logits[want]--
		clear(don)
		matVecBack(don, p.g(m.out), m.out.W, on, logits)
		rmsNormBack(dx[t], p.g(m.outNorm), x[t], m.outNorm.W, don, r)
	}
	for l := s.Layers - 1; l >= 0; l-- {
		dx = p.layerBack(l, acts[l], dx, scale)
	}
	ge := p.g(m.emb)
	for t := range T {
		row := ge[int(ids[t])*d : int(ids[t])*d+d]
		for i, g := range dx[t] {
			row[i] += g
		}
	}
	return loss, T
}

// layerBack takes the gradient at layer l's output and returns the one at
// its input, adding its weights' gradients.
func (p *pass) layerBack(l int, a *layerActs, dout [][]float64, scale float64) [][]float64 {
	s, L := p.m.Shape, p.m.layers[l]
	T := len(dout)
	d, hd, H, KV := s.Hidden, s.headDim(), s.Heads, s.KVHeads
	group := H / KV
	dx2 := vecs(T, d)
	dhh := make([]float64, s.FFN)
	dgt := make([]float64, s.FFN)
	dup := make([]float64, s.FFN)
	dfn := make([]float64, d)
	for t := range T {
		clear(dhh)
		matVecBack(dhh, p.g(L.down), L.down.W, a.hh[t], dout[t])
		for i := range s.FFN {
			g := a.gt[t][i]
			sg := 1 / (1 + math.Exp(-g))
			dup[i] = dhh[i] * g * sg
			dgt[i] = dhh[i] * a.up[t][i] * sg * (1 + g*(1-sg))
		}
		clear(dfn)
		matVecBack(dfn, p.g(L.gate), L.gate.W, a.fn[t], dgt)
		matVecBack(dfn, p.g(L.up), L.up.W, a.fn[t], dup)
		rmsNormBack(dx2[t], p.g(L.ffnNorm), a.x2[t], L.ffnNorm.W, dfn, a.rf[t])
		for i := range d {
			dx2[t][i] += dout[t][i]
		}
	}
	datt := vecs(T, H*hd)
	for t := range T {
		matVecBack(datt[t], p.g(L.o), L.o.W, a.att[t], dx2[t])
	}
	dq, dk, dv := vecs(T, H*hd), vecs(T, KV*hd), vecs(T, KV*hd)
	for t := range T {
		for h := range H {
			kh := h / group
			pr := a.p[t][h]
			do := datt[t][h*hd : h*hd+hd]
			dp := make([]float64, len(pr))
			dot := 0.0
			for j := range pr {
				for i, g := range do {
					dp[j] += g * a.v[j][kh*hd+i]
					dv[j][kh*hd+i] += pr[j] * g
				}
				dot += pr[j] * dp[j]
			}
			q := a.q[t][h*hd : h*hd+hd]
			for j := range pr {
				ds := pr[j] * (dp[j] - dot) * scale
				if ds == 0 {
					continue
				}
				for i := range q {
					dq[t][h*hd+i] += ds * a.k[j][kh*hd+i]
					dk[j][kh*hd+i] += ds * q[i]
				}
			}
		}
	}
	dx := vecs(T, d)
	dan := make([]float64, d)
	for t := range T {
		rope(dq[t], H, hd, p.cos[t], p.sin[t], -1)
		rope(dk[t], KV, hd, p.cos[t], p.sin[t], -1)
		clear(dan)
		matVecBack(dan, p.g(L.q), L.q.W, a.an[t], dq[t])
		matVecBack(dan, p.g(L.k), L.k.W, a.an[t], dk[t])
		matVecBack(dan, p.g(L.v), L.v.W, a.an[t], dv[t])
		rmsNormBack(dx[t], p.g(L.attnNorm), a.x[t], L.attnNorm.W, dan, a.ra[t])
		for i := range d {
			dx[t][i] += dx2[t][i]
		}
	}
	return dx
}
