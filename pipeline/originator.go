package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// ModelRef names a model the swarm holds layers of.
type ModelRef struct {
	CID    string
	Name   string
	Layers int
	Hidden int
	// Float: its manifest shows only float weights (F32, F16, BF16). A
	// model known by its holders' word alone counts as quantized, whose
	// checks allow more (see SpotCheck).
	Float bool
	// Experts: its manifest shows routed experts (a mixture of experts),
	// or there is no manifest to tell.
	Experts bool
	// Shape is the model's shape as its manifest's tensor sizes give it
	// (ShapeFromManifest): routes and plans charge its Ends. Without a
	// manifest it is zero, and the ends cost nothing.
	Shape ModelShape
}

// Originator generates text through a pipeline of peers. It routes only
// through peers its View says are Routable (alive, not banned, not dead by
// the BMC) and Exclude does not name.
//
// The View's ledger (View.Trust; nil: none) is this peer's own: the
// per-layer times it measured price routes (see trust.go), and
// misbehaviour about outputs that this peer proved itself (bad numbers it
// received, a failed spot-check) is recorded in it; deaths and hangs are
// not. A route through a peer it has not proven is always spot-checked.
type Originator struct {
	Host  host.Host
	View  *swarm.View
	Local *StageServer // this peer's own stages; may be nil
	// ConnKind, if set, says how this peer reaches a peer: "local" (itself),
	// "direct", "punched" or "relayed"; traces show it per hop.
	ConnKind func(peer.ID) string
	// Exclude reports further peers a pipeline route must avoid, beyond
	// those the View says are not Routable (node: peers reached only
	// through a relay too limited for a generation's traffic). nil: none.
	Exclude func(peer.ID) bool
	// Tokenizer returns the tokenizer of a model (from a local file, or a
	// header fetched from a holder).
	Tokenizer func(ctx context.Context, m ModelRef, holders []swarm.ShardHolder) (*engine.Tokenizer, error)
	// Manifest returns the manifest of a model named by its root, from this
	// peer's store or fetched from one of holders (verified against the
	// root). The model's shape comes from it, never from what holders
	// announce. nil: the shape is what most holders announce (for
	// embedders without a store; a sybil can outvote that).
	Manifest func(ctx context.Context, root string, holders []swarm.ShardHolder) (*shards.Manifest, error)
	// RTT estimates the round trip to a peer (0: unknown).
	RTT         func(peer.ID) time.Duration
	Log         *slog.Logger
	MaxReroutes int // default 8
	// Progress is how a hung stage is noticed (see swarm.Progress).
	Progress swarm.Progress
	// Vet makes sure a peer may get its first real hop: it is called, for
	// every peer of a planned route whose claim the ledger does not show
	// verified, with the claim of the shard the hop runs on. nil lets the
	// peer through (verified now, or not checkable here); an error leaves
	// it out and the route is planned again without it. Several peers are
	// vetted at once. nil: no vetting.
	Vet func(ctx context.Context, id peer.ID, c swarm.Claim) error
	// Drafter, when set, gives a speculating generation (Request.Speculate)
	// its draft: an empty session of a model with ref's tokenizer (tok),
	// choosing tokens as sampling s does (engine.SessionDraft), and a
	// function that closes it. An error makes the generation go on
	// without drafting.
	Drafter func(ctx context.Context, ref ModelRef, tok *engine.Tokenizer, s engine.Sampling) (engine.SpecModel, func(), error)
	// VetTimeout bounds the vetting of one plan's peers (default 30 s).
	VetTimeout time.Duration
	// Referee settles a spot-check between two disagreeing hops whose
	// layers this peer does not hold itself: nil means id computed claim c
	// right; an error wrapping ErrCheckFailed means it lied (the referee
	// records that in the ledger itself). nil: no referee.
	Referee func(ctx context.Context, id peer.ID, c swarm.Claim) error
	// Verified loads layers [lo,hi) of model from weights checked against
	// the model's manifest, to settle a dispute on real traffic that no
	// third holder decides (settle.go): the shard, and a function that
	// unloads it and frees what it took. An error (no weights to be had,
	// no room for them) leaves the dispute undecided. Called at most once
	// per dispute; needs Local. nil: disputes are not settled so.
	Verified func(ctx context.Context, model string, lo, hi int) (*Shard, func(), error)
	// SpotCheck sets how often real traffic is checked on a second route.
	SpotCheck SpotCheck
	// RequireChecked refuses a route with layers nobody can check (one
	// remote peer alone holds them, and this peer has no copy): an
	// *UncheckedError before the prompt is sent, or when a failover has
	// only such a route left. Default false: the answer names those
	// layers (answer.Pipeline.Unchecked) and goes on.
	RequireChecked bool
	// Audit is the share of greedy speculative answers that no second
	// route checked whose one accepted draft token is asked about again
	// once the answer is complete (speccheck.go): 0 is every one (1),
	// negative none. An audit costs the swarm about a third of a short
	// answer's compute (BenchmarkSpeculativeCheckCost).
	Audit float64
	// Arch is how this peer computes, as its record's platform arch names
	// it (empty: engine.ComputeArch()): its own stages on a checked route
	// count as that architecture.
	Arch string
	// PrefillChunk is the size of the parts a long prompt goes down a
	// route of two or more hops in, pipelined (prefill.go): 0 sizes them
	// per route from the times measured on its hops; positive is that
	// many positions (rounded up to a multiple of the engine's prefill
	// chunk, 128); negative sends prompts whole, a stage at a time.
	PrefillChunk int
	// Acknowledge, when set, is given a receipt for the work each remote
	// hop of a route did for this peer (ledger.Exchange.Ack): the
	// positions this peer sent and got results for, through the hop's
	// layers, once the route is done with (receipts.go).
	Acknowledge func(server peer.ID, it ledger.Item)
	// Introduce, when set, is called for each remote hop of a route about
	// to open: this peer presents it the receipts others signed for its
	// work (ledger.Exchange.Introduce), in the background.
	Introduce func(server peer.ID)

	alerts   alerts   // layer ranges a disagreement put on alert (alert.go)
	disputes disputes // disputes tried from verified weights, and undecided ones (settle.go)
	costs    hopCosts // what the hops used cost: the parts of a prompt are sized by it (prefill.go)
}

// Request is one generation.
type Request struct {
	Model     string // name or CID; "" picks the only model held
	Messages  []engine.Message
	Prompt    string // raw text, when Messages is empty
	Think     *bool
	MaxTokens int
	Sampling  engine.Sampling
	// DType is the hidden-state encoding on the wire: f32 (default: greedy
	// output identical to one machine) or f16 (half the bytes per hop, for
	// slow links; rounding at each cut changes some tokens).
	DType string
	// Logits makes the last stage return logits; the originator then samples
	// (greedy unless Sampling says otherwise) and OnLogits sees them.
	Logits   bool
	OnLogits func(step int, logits []float32)
	OnToken  func(text string)
	OnTrace  func(answer.Trace)
	// OnReasoning sees the model's reasoning as it is written, apart from
	// the answer's text (a chat answer in the harmony format, GPT-OSS).
	OnReasoning func(text string)
	// Standby keeps a second route over other peers warm (fed every step):
	// a failover then costs a step instead of a replay, for twice the
	// compute. Used when such a route exists.
	Standby bool
	// Speculate drafts tokens with the originator's Drafter and has the
	// route verify them, several per round trip (see spec.go): greedy or
	// sampled (by the speculative sampling rule), but not while a second
	// route (standby, spot check) runs beside the route, nor on a route
	// that cannot verify.
	Speculate bool
	// DraftMin and DraftMax bound the draft length, chosen each round by
	// measured cost (engine.NewSpecCost): 0 and 8 by default. A DraftMin
	// above 0 drafts even where plain decoding is measured faster.
	DraftMin, DraftMax int
}

func (o *Originator) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// Resolve finds the model named (by root, file CID or name) among live
// shard holders, and its shape (from its manifest, see Manifest).
func (o *Originator) Resolve(model string) (ModelRef, []swarm.ShardHolder, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return o.resolve(ctx, model)
}

func (o *Originator) resolve(ctx context.Context, model string) (ModelRef, []swarm.ShardHolder, error) {
	byCID := map[string][]swarm.ShardHolder{}
	names := map[string]string{}
	for _, p := range o.View.Peers() {
		// Alive, not Routable: a model held only by banned or BMC-dead peers
		// is found, and its routes say which layers they leave uncovered;
		// its manifest may still be fetched from them (it is verified).
		if !p.Alive {
			continue
		}
		for _, s := range p.Cap.Shards {
			byCID[s.ModelCID] = append(byCID[s.ModelCID], swarm.ShardHolder{Peer: p, Shard: s})
			if s.ModelName != "" {
				names[s.ModelCID] = s.ModelName
			}
		}
	}
	var cands []string
	for c := range byCID {
		if model == "" || c == model || names[c] == model {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		if model == "" {
			return ModelRef{}, nil, fmt.Errorf("%w: no live peer announces any shard", ErrNoModel)
		}
		return ModelRef{}, nil, fmt.Errorf("%w: %q", ErrNoModel, model)
	}
	cid, err := o.pick(cands, byCID, names, model)
	if err != nil {
		return ModelRef{}, nil, err
	}
	hs := byCID[cid]
	ref := ModelRef{CID: cid, Name: names[cid]}
	if c, err := shards.ParseModelCID(cid); err == nil && shards.IsRoot(c) && o.Manifest != nil {
		m, err := o.Manifest(ctx, cid, hs)
		if err != nil {
			return ModelRef{}, nil, fmt.Errorf("pipeline: the manifest of %s: %w", cid, err)
		}
		if ref.Shape, err = ShapeFromManifest(m); err != nil {
			return ModelRef{}, nil, fmt.Errorf("pipeline: the manifest of %s: %w", cid, err)
		}
		ref.Layers, ref.Hidden, ref.Float, ref.Experts = m.Layers, m.Hidden, !m.Quantized(), m.Experts()
		if ref.Name == "" {
			ref.Name = m.Name
		}
		return ref, hs, nil
	}
	ref.Experts = true // unknown: as if, so that no honest peer is banned for an expert flip
	// No manifest to go by: the shape is what most holders say, so one
	// stale or lying announcement does not decide it (plan then leaves
	// that holder out).
	votes := map[[2]int]int{}
	var shape [2]int
	for _, h := range hs {
		k := [2]int{h.Shard.Layers, h.Shard.Hidden}
		votes[k]++
		if votes[k] > votes[shape] || (votes[k] == votes[shape] && (k[0] < shape[0] || (k[0] == shape[0] && k[1] < shape[1]))) {
			shape = k
		}
	}
	ref.Layers, ref.Hidden = shape[0], shape[1]
	return ref, hs, nil
}

// pick chooses among models that match a request: a CID named exactly
// wins; else one this peer serves layers of itself; else the one held by
// the most distinct live peers, when one leads. A record announcing
// another model under a popular name cannot take the name over from the
// model its holders serve, nor make the name ambiguous when it is alone.
func (o *Originator) pick(cands []string, byCID map[string][]swarm.ShardHolder, names map[string]string, model string) (string, error) {
	if len(cands) == 1 {
		return cands[0], nil
	}
	for _, c := range cands {
		if c == model {
			return c, nil
		}
	}
	slices.Sort(cands)
	score := func(c string) [2]int {
		local, peers := 0, map[peer.ID]bool{}
		for _, h := range byCID[c] {
			if h.Peer.ID == o.Host.ID() {
				local = 1
			}
			peers[h.Peer.ID] = true
		}
		return [2]int{local, len(peers)}
	}
	slices.SortStableFunc(cands, func(a, b string) int {
		sa, sb := score(a), score(b)
		return cmp.Or(cmp.Compare(sb[0], sa[0]), cmp.Compare(sb[1], sa[1]))
	})
	if score(cands[0]) != score(cands[1]) {
		return cands[0], nil
	}
	var all []string
	for _, c := range cands {
		all = append(all, names[c]+" ("+c+")")
	}
	if model == "" {
		return "", fmt.Errorf("%w, name one: %s", ErrAmbiguousModel, strings.Join(all, ", "))
	}
	return "", fmt.Errorf("%w and %q names several, each held by as many peers; use a CID: %s", ErrAmbiguousModel, model, strings.Join(all, ", "))
}

// excluded combines the view's Routable, the caller's Exclude and the
// peers that failed during this generation. A peer that failed is usable
// again once it has sent a heartbeat since (it was restarted, or resumed).
// Without a view only the last two apply.
func (o *Originator) excluded(failed map[string]time.Time) func(string) bool {
	return func(p string) bool {
		id, err := peer.Decode(p)
		if err != nil {
			return true
		}
		if at, ok := failed[p]; ok {
			if o.View == nil {
				return true
			}
			if vp, ok := o.View.Get(id); !ok || !vp.LastSeen.After(at) {
				return true
			}
		}
		if o.View != nil && !o.View.Routable(id) {
			return true
		}
		return o.Exclude != nil && o.Exclude(id)
	}
}

// markHung keeps a peer a watch found hung out of routes (this
// generation's replans, the vetting of its spares, the next questions)
// until it answers a ping again (swarm.View.MarkHung). A peer that
// answers pings but makes no progress (swarm.ErrStalled) is only this
// generation's failure.
func (o *Originator) markHung(id peer.ID, cause error) {
	if o.View != nil && !errors.Is(cause, swarm.ErrStalled) {
		o.View.MarkHung(id)
	}
}

// plan assembles the cheapest live route, its new peers vetted (see
// planCtx), within VetTimeout.
func (o *Originator) plan(ref ModelRef, holders []swarm.ShardHolder, failed map[string]time.Time) ([]Hop, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.vetTimeout())
	defer cancel()
	return o.planCtx(ctx, ref, holders, failed)
}

func (o *Originator) newOpen(ref ModelRef, hops []Hop, req Request) Open {
	open := Open{Session: rand.Uint64() | 1, Model: ref.CID, Layers: ref.Layers, Hidden: ref.Hidden,
		DType: req.DType, Sampling: req.Sampling, Logits: req.Logits}
	for _, h := range hops {
		open.Route = append(open.Route, RouteHop{Peer: h.Peer, Start: h.Start, End: h.End})
	}
	return open
}

// Generate runs one generation through the swarm.
func (o *Originator) Generate(ctx context.Context, req Request) (*answer.Pipeline, error) {
	start := time.Now()
	if req.DType == "" {
		req.DType = DTypeF32
	}
	if req.DType != DTypeF16 && req.DType != DTypeF32 {
		return nil, fmt.Errorf("pipeline: dtype %q (f16 or f32)", req.DType)
	}
	ref, holders, err := o.resolve(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	failed := map[string]time.Time{}
	hops, err := o.planCtx(ctx, ref, holders, failed)
	if err != nil {
		return nil, err // a gap names the missing layers before anything starts
	}
	if err := o.refuseUnchecked(ref, holders, failed, hops); err != nil {
		return nil, err
	}
	tok, err := o.Tokenizer(ctx, ref, holders)
	if err != nil {
		return nil, fmt.Errorf("pipeline: tokenizer of %s: %w", ref.CID, err)
	}
	var prompt []int32
	if len(req.Messages) > 0 {
		prompt, err = tok.EncodeChat(req.Messages, engine.ChatOptions{Think: req.Think})
	} else {
		prompt, err = tok.Encode(req.Prompt, true)
	}
	if err != nil {
		return nil, err
	}
	if len(prompt) == 0 {
		return nil, errors.New("pipeline: empty prompt")
	}
	g := &generation{o: o, req: req, ref: ref, holders: holders, failed: failed, tok: tok, prompt: prompt,
		res:     &answer.Pipeline{Model: ref.Name, ModelCID: ref.CID, PromptTokens: len(prompt), DType: req.DType, Tokens: []int32{}},
		sampler: engine.NewSampler(req.Sampling.Options()),
	}
	err = g.run(ctx, hops, start)
	g.disputedNote()
	g.res.TotalMS = msSince(start)
	return g.res, err
}

func msSince(t time.Time) float64 { return ms(time.Since(t)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
