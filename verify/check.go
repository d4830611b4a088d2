package verify

import (
	"bufio"
	"cmp"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// Reference gives a checker the layers it recomputes a claim with, from
// weights this peer verified itself.
type Reference interface {
	// Layer returns a loaded model holding layer l of model (a CID): one
	// of this peer's own shards or role models, or a one-layer slice
	// [l,l+1) it fetched and verified against the model's manifest. A
	// model holding more than layer l is welcome: when it holds the whole
	// range claimed, the checker recomputes all of it. The checker does
	// not close it, and may use it concurrently.
	Layer(ctx context.Context, model string, l int) (*engine.Model, error)
}

// Checker challenges peers' claims and records the outcome in Trust.
// Set its fields before the first check; Host and Trust are required.
type Checker struct {
	Host  host.Host
	Trust *swarm.Trust
	// Ref is this peer's own copy of the layers (nil: every claim stays
	// unverified).
	Ref Reference
	Log *slog.Logger
	// CheckLayers is how many single layers of a claim are recomputed
	// when this peer does not hold the whole range itself (default 2):
	// the claim's first layer, which ties the trace to this challenge's
	// fresh input, and CheckLayers-1 others drawn at random.
	CheckLayers int
	// Tolerance is the largest relative L2 error ‖got − want‖ / ‖want‖ a
	// boundary may show (default by the reference's weights: 1e-3 for
	// f32, f16 and bf16; for quantized ones 1e-2 from a peer whose record
	// names this peer's CPU architecture, else 3e-2, where honest peers on
	// other CPUs differ by up to 1.5e-2: see tolerance.go).
	Tolerance float64
	// Arch, when set, names the CPU architecture a peer's record claims
	// ("": none known).
	Arch func(peer.ID) string
	// Tokens is the number of input positions of a challenge (default 8,
	// at most MaxTokens).
	Tokens int
	// Timeout bounds a challenge, the peer's queue wait included (default
	// 2 min).
	Timeout time.Duration
	// Retry is how long a claim that could not be checked (no reference
	// here, or the peer refused or was unreachable) is not tried again
	// (default 1 min).
	Retry time.Duration
	// NotHeldRetry is how long Vet leaves out a claim its peer refused as
	// not held (ErrNotHeld) before it challenges it again (default 5 s, at
	// most Retry): long enough that a peer which keeps claiming layers it
	// refuses costs a challenge now and then, short enough that one which
	// was loading them is back soon.
	NotHeldRetry time.Duration

	mu      sync.Mutex
	flights map[vetKey]*flight
	recent  map[vetKey]outcome // claims that could not be checked lately
	noRef   map[refKey]time.Time
	quants  map[string]bool // reference file -> whether its weights are quantized
}

type vetKey struct {
	peer  peer.ID
	claim swarm.Claim
}

type refKey struct {
	model string
	layer int
}

type flight struct {
	done chan struct{}
	err  error
}

type outcome struct {
	err   error // nil: unverifiable here
	until time.Time
}

// maxRemembered bounds the checker's memory of recent outcomes.
const maxRemembered = 4096

// Report is what one challenge found.
type Report struct {
	Peer peer.ID
	// Claim is the range checked (a whole-model claim resolved to [0,n)).
	Claim swarm.Claim
	// Whole: this peer held the whole range and recomputed every layer;
	// otherwise only the layers in Checked were.
	Whole     bool
	Checked   []int
	Positions int
	// WorstRelErr is the largest relative L2 error seen, at WorstLayer's
	// output.
	WorstRelErr float64
	WorstLayer  int
	// Elapsed is from sending the request to the trace's last byte; RTT
	// is the round trip the host measured; MsPerLayer is (Elapsed − RTT)
	// per layer and per position: the same order as a decode step's cost
	// per layer, on the optimistic side (0.6b shape, q8_0, on this
	// project's 2-core machines: 0.75-0.86 ms per layer and position, a
	// decode step 1.76 ms per layer; see BenchmarkChallenge). Routing
	// takes the larger of it and what the peer announces.
	Elapsed    time.Duration
	RTT        time.Duration
	MsPerLayer float64
	// SentBytes and RecvBytes are the challenge's frames.
	SentBytes, RecvBytes int64
}

func (c *Checker) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

func (c *Checker) settings() (k int, tokens int, timeout, retry time.Duration) {
	k, tokens, timeout, retry = c.CheckLayers, c.Tokens, c.Timeout, c.Retry
	if k <= 0 {
		k = 2
	}
	if tokens <= 0 || tokens > MaxTokens {
		tokens = MaxTokens
	}
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	if retry <= 0 {
		retry = time.Minute
	}
	return
}

// Vet makes sure id may be given real work under claim: nil when the
// claim is verified (already, or by a challenge now) or cannot be checked
// by this peer (no reference: it stays unverified); an error when id is
// banned, fails the challenge (and is banned for it), or refuses or does
// not answer it (then it is not banned, but left out for Retry, or for
// NotHeldRetry when it says it does not hold the layers). Checks of
// the same peer and claim at once share one challenge.
func (c *Checker) Vet(ctx context.Context, id peer.ID, claim swarm.Claim) error {
	if banned, why := c.Trust.Banned(id); banned {
		return fmt.Errorf("%w: %s", ErrBanned, why)
	}
	if c.Trust.Verified(id, claim) {
		return nil
	}
	k := vetKey{id, claim}
	_, _, _, retry := c.settings()
	c.mu.Lock()
	if o, ok := c.recent[k]; ok && time.Now().Before(o.until) {
		c.mu.Unlock()
		return o.err
	}
	if f, ok := c.flights[k]; ok {
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	if c.flights == nil {
		c.flights = map[vetKey]*flight{}
	}
	c.flights[k] = f
	c.mu.Unlock()

	// The challenge is shared: it runs on its own (bounded by Timeout in
	// Check), so a caller that gives up does not fail the others waiting
	// for it.
	go func() {
		cctx := context.WithoutCancel(ctx)
		_, err := c.Check(cctx, id, claim)
		var fe *FailError
		switch {
		case err == nil, errors.As(err, &fe):
		case errors.Is(err, ErrNoReference):
			c.log().Debug("verify: claim left unverified", "peer", id, "model", claim.Model, "layers", layers(claim), "err", err)
			c.remember(k, outcome{until: time.Now().Add(retry)})
			err = nil
		case errors.Is(err, ErrNotHeld):
			// Most often a peer restarting or loading: asked again soon.
			c.remember(k, outcome{err: err, until: time.Now().Add(min(retry, cmp.Or(c.NotHeldRetry, 5*time.Second)))})
		default:
			c.remember(k, outcome{err: err, until: time.Now().Add(retry)})
		}
		f.err = err
		c.mu.Lock()
		delete(c.flights, k)
		c.mu.Unlock()
		close(f.done)
	}()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Checker) remember(k vetKey, o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recent == nil {
		c.recent = map[vetKey]outcome{}
	}
	if len(c.recent) >= maxRemembered {
		now := time.Now()
		for k, o := range c.recent {
			if now.After(o.until) {
				delete(c.recent, k)
			}
		}
		for k := range c.recent { // still full: drop any one
			if len(c.recent) < maxRemembered {
				break
			}
			delete(c.recent, k)
		}
	}
	c.recent[k] = o
}

// reference is Ref.Layer, checked to hold layer l, with failures
// remembered for Retry. Errors wrap ErrNoReference.
func (c *Checker) reference(ctx context.Context, model string, l int) (*engine.Model, error) {
	_, _, _, retry := c.settings()
	k := refKey{model, l}
	c.mu.Lock()
	until, missed := c.noRef[k]
	c.mu.Unlock()
	if missed && time.Now().Before(until) {
		return nil, fmt.Errorf("%w: layer %d of %s (none found lately)", ErrNoReference, l, model)
	}
	if c.Ref == nil {
		return nil, fmt.Errorf("%w: this peer keeps no reference", ErrNoReference)
	}
	m, err := c.Ref.Layer(ctx, model, l)
	if err == nil && !holds(m, l, l+1) {
		err = fmt.Errorf("the model given does not hold layer %d", l)
	}
	if err != nil {
		if ctx.Err() == nil {
			c.mu.Lock()
			if c.noRef == nil || len(c.noRef) >= maxRemembered {
				c.noRef = map[refKey]time.Time{}
			}
			c.noRef[k] = time.Now().Add(retry)
			c.mu.Unlock()
		}
		return nil, fmt.Errorf("%w: layer %d of %s: %v", ErrNoReference, l, model, err)
	}
	return m, nil
}

// holds reports whether m can run layers [a,b).
func holds(m *engine.Model, a, b int) bool {
	if m == nil {
		return false
	}
	in := m.Info()
	return in.LayerRange[0] <= a && b <= in.LayerRange[1] && (a > 0 || in.HasEmbedding) && (b < in.Layers || in.HasHead)
}

// Check challenges id's claim once, whatever the ledger says, and records
// a pass or a failure in Trust. Errors: a *FailError when the peer failed
// (it is banned); one wrapping ErrNoReference when this peer cannot check
// the claim; one wrapping ErrNotHeld when the peer says it does not hold
// the layers (the claim is withdrawn in Trust: no verdict, no ban); a
// *WireError or a transport error when the peer refused otherwise or did
// not answer (no verdict).
func (c *Checker) Check(ctx context.Context, id peer.ID, claim swarm.Claim) (*Report, error) {
	k, tokens, timeout, _ := c.settings()
	if claim.Model == "" || claim.Start < 0 || claim.End <= claim.Start {
		return nil, fmt.Errorf("verify: bad claim %s", claim)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ref0, err := c.reference(ctx, claim.Model, claim.Start)
	if err != nil {
		return nil, err
	}
	info := ref0.Info()
	tol := c.tolerance(ref0, id)
	a, b := claim.Start, claim.End
	if claim.Whole() {
		b = info.Layers
	}
	if b > info.Layers {
		return nil, fmt.Errorf("verify: claim %s reaches past the model's %d layers", claim, info.Layers)
	}
	if b-a > MaxLayers || traceBytes(b-a, tokens, info.Hidden, info.VocabSize, b == info.Layers) > MaxTraceBytes {
		return nil, fmt.Errorf("%w: layers [%d,%d) are too many for one challenge", ErrNoReference, a, b)
	}
	// A model that runs whole only (gemma3n) is checked whole, against a
	// whole copy, on the logits after its last layer.
	whole := engine.WholeOnly(info.Arch)
	if whole != "" && (a != 0 || b != info.Layers || !holds(ref0, a, b)) {
		return nil, fmt.Errorf("%w: %s (%s) is checked whole, against a whole copy: %s", ErrNoReference, claim, info.Arch, whole)
	}
	at := func(l int) int { return l - a } // layer l's place in the trace
	if whole != "" {
		at = func(int) int { return 0 }
		// The logits carry every layer's rounding, not one's: the bound
		// grows as a random walk's would, with the square root of the
		// layers (an honest q4_k peer on other kernels: 3.2e-2 after the
		// 10 layers of the small synthetic gemma3n, 0.095 allowed).
		tol *= math.Sqrt(float64(b - a))
	}
	rep := &Report{Peer: id, Claim: swarm.Claim{Model: claim.Model, Start: a, End: b}, Positions: tokens, WorstLayer: -1}
	refs := map[int]*engine.Model{a: ref0}
	rep.Whole = holds(ref0, a, b)
	if whole != "" {
		rep.Checked = []int{b - 1}
	} else if rep.Whole {
		for l := a; l < b; l++ {
			rep.Checked = append(rep.Checked, l)
		}
	} else {
		rep.Checked = c.pick(ctx, claim.Model, a, b, k, info, refs)
	}
	req := newInput(claim.Model, a, b, tokens, info)
	trace, err := c.challenge(ctx, rep, req, info)
	if err != nil {
		var fe *FailError
		if errors.As(err, &fe) {
			return rep, c.fail(rep, claim, fe.Layer, 0, fe.Fault)
		}
		if errors.Is(err, ErrNotHeld) {
			c.Trust.Withdraw(id, rep.Claim)
			c.log().Info("verify: peer refused layers it claimed: the claim is withdrawn, not banned", "peer", id,
				"model", claim.Model, "layers", layers(rep.Claim), "err", err)
		}
		return rep, err
	}
	for i, v := range trace {
		l := a + i
		if whole != "" {
			l = b - 1
		}
		if j := firstNonFinite(v); j >= 0 {
			return rep, c.fail(rep, claim, l, 0, fmt.Sprintf("layer %d output holds %v at index %d", l, v[j], j))
		}
	}
	compare := func(l int, want []float32) error {
		if j := firstNonFinite(want); j >= 0 {
			return fmt.Errorf("verify: this peer's own layer %d gave %v at index %d", l, want[j], j)
		}
		e := relL2(trace[at(l)], want)
		if e > rep.WorstRelErr || rep.WorstLayer < 0 {
			rep.WorstRelErr, rep.WorstLayer = e, l
		}
		if e > tol {
			return c.fail(rep, claim, l, e, fmt.Sprintf("layer %d output off by %.3g (relative L2; tolerance %.0e)", l, e, tol))
		}
		return nil
	}
	if whole != "" {
		err = c.recompute(ctx, ref0, a, b, req.Tokens, req.Hidden, compare)
	} else if rep.Whole {
		// Each layer from the peer's own input to it, not from this peer's
		// chain: the tolerance bounds one layer's difference (another CPU
		// sums in another order), never a drift accumulated over many.
		for l := a; l < b && err == nil; l++ {
			tk, hd := req.Tokens, req.Hidden
			if l > a {
				tk, hd = nil, trace[l-1-a]
			}
			err = c.recompute(ctx, ref0, l, l+1, tk, hd, compare)
		}
	} else {
		for _, l := range rep.Checked {
			tk, hd := req.Tokens, req.Hidden
			if l > a {
				tk, hd = nil, trace[l-1-a]
			}
			if err = c.recompute(ctx, refs[l], l, l+1, tk, hd, compare); err != nil {
				break
			}
		}
	}
	if err != nil {
		return rep, err
	}
	c.Trust.Pass(id, claim)
	if rep.MsPerLayer > 0 {
		c.Trust.Measure(id, swarm.MsPerLayerKey(claim.Model), rep.MsPerLayer)
	}
	c.log().Info("verify: peer passed a challenge", "peer", id, "model", claim.Model, "layers", layers(rep.Claim),
		"checked", rep.Checked, "worst_rel_err", rep.WorstRelErr, "ms_per_layer", rep.MsPerLayer)
	return rep, nil
}

// recompute runs [a,b) on this peer's reference and compares each
// layer's output.
func (c *Checker) recompute(ctx context.Context, m *engine.Model, a, b int, tokens []int32, hidden []float32,
	compare func(l int, want []float32) error) error {
	s, err := m.AcquireSession(ctx)
	if err != nil {
		return fmt.Errorf("verify: this peer's reference: %w", err)
	}
	defer s.Close()
	return runLayers(ctx, m, s, a, b, tokens, hidden, compare)
}

// pick chooses the layers to recompute: a first, then k-1 others at
// random among those this peer can get a reference for.
func (c *Checker) pick(ctx context.Context, model string, a, b, k int, info engine.Info, refs map[int]*engine.Model) []int {
	out := []int{a}
	pool := make([]int, 0, b-a-1)
	for l := a + 1; l < b; l++ {
		pool = append(pool, l)
	}
	rand.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	for _, l := range pool {
		if len(out) >= k || ctx.Err() != nil {
			break
		}
		m, err := c.reference(ctx, model, l)
		if err == nil && (m.Info().Layers != info.Layers || m.Info().Hidden != info.Hidden || m.Info().VocabSize != info.VocabSize) {
			err = fmt.Errorf("reference of layer %d has another shape", l)
		}
		if err != nil {
			c.log().Debug("verify: a layer cannot be recomputed here", "model", model, "layer", l, "err", err)
			continue
		}
		refs[l] = m
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// newInput draws a fresh challenge input from a seed of crypto/rand, so
// no peer can know it before it is sent: token ids for layer 0, else
// normal values scaled to RMS 1 per position.
func newInput(model string, a, b, n int, info engine.Info) *Request {
	var seed [32]byte
	crand.Read(seed[:])
	r := rand.New(rand.NewChaCha8(seed))
	req := &Request{Model: model, Start: a, End: b}
	if a == 0 {
		req.Tokens = make([]int32, n)
		for i := range req.Tokens {
			req.Tokens[i] = int32(r.IntN(info.VocabSize))
		}
		return req
	}
	H := info.Hidden
	req.HiddenSize = H
	req.Hidden = make([]float32, n*H)
	for p := 0; p < n; p++ {
		row := req.Hidden[p*H : (p+1)*H]
		var ss float64
		for i := range row {
			v := r.NormFloat64()
			row[i] = float32(v)
			ss += v * v
		}
		scale := 1 / math.Sqrt(ss/float64(H))
		for i := range row {
			row[i] = float32(float64(row[i]) * scale)
		}
	}
	return req
}

// challenge sends req to the peer and reads its trace, timing it. A reply
// that breaks the protocol or refuses a claimed range comes back as a
// *FailError; a refusal as a *WireError.
func (c *Checker) challenge(ctx context.Context, rep *Report, req *Request, info engine.Info) ([][]float32, error) {
	id := rep.Peer
	bad := func(layer int, f string, args ...any) error {
		return &FailError{Peer: id, Layer: layer, Fault: fmt.Sprintf(f, args...)}
	}
	st, err := c.Host.NewStream(network.WithAllowLimitedConn(ctx, ProtocolID), id, ProtocolID)
	if err != nil {
		return nil, fmt.Errorf("verify: opening a challenge to %s: %w", id, err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	body := EncodeRequest(req)
	rep.SentBytes = frameSize(len(body))
	t0 := time.Now()
	if err := writeFrame(st, frameRequest, body); err != nil {
		st.Reset()
		return nil, fmt.Errorf("verify: sending a challenge to %s: %w", id, err)
	}
	st.CloseWrite()
	r := bufio.NewReaderSize(st, 64<<10)
	n, H := req.Positions(), info.Hidden
	// A model that runs whole only answers with the last layer's output
	// alone (runLayers).
	first := req.Start
	if engine.WholeOnly(info.Arch) != "" {
		first = req.End - 1
	}
	trace := make([][]float32, 0, req.End-first)
	for l := first; l < req.End; l++ {
		want := n * H
		if l == info.Layers-1 {
			want = info.VocabSize
		}
		typ, body, err := readFrame(r, max(8+4*want, maxJSON))
		if err != nil {
			st.Reset()
			if errors.Is(err, ErrBadFrame) {
				return nil, bad(l, "a malformed reply where layer %d's output belongs: %v", l, err)
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("verify: no answer from %s within the challenge's time: %w", id, ctx.Err())
			}
			return nil, fmt.Errorf("verify: reading the challenge reply of %s: %w", id, err)
		}
		rep.RecvBytes += frameSize(len(body))
		switch typ {
		case frameError:
			we, err := decodeError(body)
			if err != nil {
				return nil, bad(-1, "%v", err)
			}
			if l == first && we.Code == CodeNotHeld {
				return nil, fmt.Errorf("%w: %s claims layers [%d,%d) but refused them: %s", ErrNotHeld, id, req.Start, req.End, we.Message)
			}
			if l == first && we.Code == CodeBadRequest {
				// A holder of the claimed layers takes any well-formed
				// input of the model's shape.
				return nil, bad(-1, "it claims layers [%d,%d) but refused them: %s: %s", req.Start, req.End, we.Code, we.Message)
			}
			return nil, we
		case frameBoundary:
		default:
			return nil, bad(l, "frame type %d where layer %d's output belongs", typ, l)
		}
		got, v, err := DecodeBoundary(body)
		if err != nil {
			return nil, bad(l, "%v", err)
		}
		if got != l || len(v) != want {
			return nil, bad(l, "sent %d floats as layer %d's output where layer %d's %d belong", len(v), got, l, want)
		}
		trace = append(trace, v)
	}
	rep.Elapsed = time.Since(t0)
	rep.RTT = c.Host.Peerstore().LatencyEWMA(id)
	if d := rep.Elapsed - rep.RTT; d > 0 {
		rep.MsPerLayer = float64(d.Microseconds()) / 1000 / float64((req.End-req.Start)*n)
	}
	return trace, nil
}

// fail bans the peer for a failed check, logs what was seen, and returns
// the *FailError.
func (c *Checker) fail(rep *Report, claim swarm.Claim, layer int, relErr float64, fault string) error {
	fe := &FailError{Peer: rep.Peer, Claim: claim, Layer: layer, RelErr: relErr, Fault: fault}
	ban := c.Trust.Fail(rep.Peer, fmt.Sprintf("challenge on layers %s of %s: %s", layers(rep.Claim), claim.Model, fault))
	c.log().Warn("verify: peer failed a challenge; banned", "peer", rep.Peer, "model", claim.Model, "layers", layers(rep.Claim),
		"boundary", layer, "rel_err", relErr, "fault", fault, "ban", ban)
	return fe
}

func layers(c swarm.Claim) string {
	if c.Whole() {
		return "whole model"
	}
	return fmt.Sprintf("[%d,%d)", c.Start, c.End)
}
