package pipeline

import (
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

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// ModelRef names a model the swarm holds layers of.
type ModelRef struct {
	CID    string
	Name   string
	Layers int
	Hidden int
}

// Originator generates text through a pipeline of peers.
type Originator struct {
	Host  host.Host
	View  *swarm.View
	Local *StageServer // this peer's own stages; may be nil
	// Exclude reports peers routing must avoid (e.g. declared dead by the
	// BMC). nil: none.
	Exclude func(peer.ID) bool
	// Tokenizer returns the tokenizer of a model (from a local file, or a
	// header fetched from a holder).
	Tokenizer func(ctx context.Context, m ModelRef, holders []swarm.ShardHolder) (*engine.Tokenizer, error)
	// RTT estimates the round trip to a peer (0: unknown).
	RTT         func(peer.ID) time.Duration
	Log         *slog.Logger
	MaxReroutes int // default 8
	// Progress is how a hung stage is noticed (see swarm.Progress).
	Progress swarm.Progress
	// Trust is this peer's own ledger (nil: none). Misbehaviour about
	// outputs that this peer proved itself (bad numbers it received, a
	// failed spot-check) is recorded in it; deaths and hangs are not. A
	// route through a peer it has not proven is always spot-checked.
	Trust *swarm.Trust
	// Referee settles a spot-check between two disagreeing hops whose
	// layers this peer does not hold itself: nil means id computed claim c
	// right; an error wrapping ErrCheckFailed means it lied (the referee
	// records that in Trust itself). nil: no referee.
	Referee func(ctx context.Context, id peer.ID, c swarm.Claim) error
	// SpotCheck sets how often real traffic is checked on a second route.
	SpotCheck SpotCheck
}

// Request is one generation.
type Request struct {
	Model     string // name or CID; "" picks the only model held
	Messages  []engine.Message
	Prompt    string // raw text, when Messages is empty
	Think     *bool
	MaxTokens int
	Sampling  Sampling
	// DType is the hidden-state encoding on the wire: f32 (default: greedy
	// output identical to one machine) or f16 (half the bytes per hop, for
	// slow links; rounding at each cut changes some tokens).
	DType string
	// Logits makes the last stage return logits; the originator then samples
	// (greedy unless Sampling says otherwise) and OnLogits sees them.
	Logits   bool
	OnLogits func(step int, logits []float32)
	OnToken  func(text string)
	OnTrace  func(TraceEvent)
	// Standby keeps a second route over other peers warm (fed every step):
	// a failover then costs a step instead of a replay, for twice the
	// compute. Used when such a route exists.
	Standby bool
}

// TraceEvent is progress worth showing: "route", "standby" (a warm standby
// route opened), "reroute", "spot_check" (a second route opened to check
// this one), "mismatch" (the two disagreed; Failed is the liar found, if
// any), "accusation" (an error frame named a peer that answers pings).
type TraceEvent struct {
	Kind     string  `json:"kind"`
	Route    []Hop   `json:"route,omitempty"`
	Failed   string  `json:"failed,omitempty"`
	Layers   [2]int  `json:"layers,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	AtToken  int     `json:"at_token"`
	DetectMS float64 `json:"detect_ms,omitempty"`
	ReplayMS float64 `json:"replay_ms,omitempty"`
	CostMS   float64 `json:"cost_ms,omitempty"`
	Replay   int     `json:"replay_tokens,omitempty"`
	Standby  bool    `json:"standby,omitempty"`
	// Proven and Evidence: how the originator knows of the failure (see
	// Reroute); Suspects: peers avoided without proof.
	Proven   bool     `json:"proven,omitempty"`
	Evidence string   `json:"evidence,omitempty"`
	Suspects []string `json:"suspects,omitempty"`
}

// HopStat is one hop's cost, averaged over the decode steps.
type HopStat struct {
	Peer       string  `json:"peer"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	ComputeMS  float64 `json:"compute_ms_per_token"`
	TransferMS float64 `json:"transfer_ms_per_token"` // to this hop and back, beyond the hops after it
}

// Reroute records a failover. DetectMS is how long the failed step ran
// before the failure was known (a reset stream: at once; a hung peer: the
// progress deadline and a ping); ReplayMS is the new route's open and
// replay; CostMS is both.
type Reroute struct {
	AtToken      int     `json:"at_token"`
	Failed       string  `json:"failed_peer"`
	Layers       [2]int  `json:"failed_layers"`
	Reason       string  `json:"reason"`
	NewRoute     []Hop   `json:"new_route"`
	ReplayTokens int     `json:"replay_tokens"`
	DetectMS     float64 `json:"detect_ms"`
	ReplayMS     float64 `json:"replay_ms"`
	CostMS       float64 `json:"cost_ms"`
	Standby      bool    `json:"standby,omitempty"` // the warm standby took over (no replay)
	// Proven: the originator saw the failure itself (Evidence says how:
	// its own stream, ping or check, the view, the first hop's own report,
	// a spot-check or the referee), and the failed peer is left out. Not
	// proven (Evidence accusation, stall or undecided): nobody is left out
	// or penalised; Suspects are avoided for the rest of the generation
	// where other peers cover their layers.
	Proven   bool     `json:"proven"`
	Evidence string   `json:"evidence"`
	Suspects []string `json:"suspects,omitempty"`
}

// GenerateResult is the outcome of Generate.
type GenerateResult struct {
	Model        string    `json:"model"`
	ModelCID     string    `json:"model_cid"`
	Text         string    `json:"text"`
	Tokens       []int32   `json:"tokens"`
	PromptTokens int       `json:"prompt_tokens"`
	DType        string    `json:"dtype"`
	Hops         []HopStat `json:"hops"`
	Reroutes     []Reroute `json:"reroutes,omitempty"`
	TTFTMS       float64   `json:"ttft_ms"`
	PrefillMS    float64   `json:"prefill_ms"`
	DecodeTPS    float64   `json:"decode_tok_s"`
	TotalMS      float64   `json:"total_ms"`
	Done         string    `json:"done"` // stop, length, cancel
	// SpotChecked is how many steps a second route confirmed, SpotMaxDiff
	// the largest difference between the two among those, and Mismatches
	// how many it contradicted (see SpotCheck).
	SpotChecked int     `json:"spot_checked,omitempty"`
	SpotMaxDiff float64 `json:"spot_max_diff,omitempty"`
	Mismatches  int     `json:"mismatches,omitempty"`
}

func (o *Originator) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// Resolve finds the model named (by CID or name) among live shard holders.
func (o *Originator) Resolve(model string) (ModelRef, []swarm.ShardHolder, error) {
	byCID := map[string][]swarm.ShardHolder{}
	names := map[string]string{}
	for _, p := range o.View.Peers() {
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
	var cid string
	switch {
	case model == "" && len(byCID) == 1:
		for c := range byCID {
			cid = c
		}
	case model == "":
		if len(byCID) == 0 {
			return ModelRef{}, nil, fmt.Errorf("%w: no live peer announces any shard", ErrNoModel)
		}
		var all []string
		for c := range byCID {
			all = append(all, names[c]+" ("+c+")")
		}
		slices.Sort(all)
		return ModelRef{}, nil, fmt.Errorf("pipeline: several models are held, name one: %s", strings.Join(all, ", "))
	default:
		for c := range byCID {
			if c == model || names[c] == model {
				if cid != "" && cid != c {
					return ModelRef{}, nil, fmt.Errorf("pipeline: %q names several models; use a CID", model)
				}
				cid = c
			}
		}
	}
	hs := byCID[cid]
	if cid == "" || len(hs) == 0 {
		return ModelRef{}, nil, fmt.Errorf("%w: %q", ErrNoModel, model)
	}
	// The model's shape is what most holders say: one stale or lying
	// announcement must not decide it (plan then leaves that holder out).
	votes := map[[2]int]int{}
	var shape [2]int
	for _, h := range hs {
		k := [2]int{h.Shard.Layers, h.Shard.Hidden}
		votes[k]++
		if votes[k] > votes[shape] || (votes[k] == votes[shape] && (k[0] < shape[0] || (k[0] == shape[0] && k[1] < shape[1]))) {
			shape = k
		}
	}
	ref := ModelRef{CID: cid, Name: names[cid], Layers: shape[0], Hidden: shape[1]}
	return ref, hs, nil
}

// excluded combines the caller's exclusion, the view's liveness and the
// peers that failed during this generation. A peer that failed is usable
// again once it has sent a heartbeat since (it was restarted, or resumed).
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
		if o.View != nil && !o.View.Alive(id) {
			return true
		}
		return o.Exclude != nil && o.Exclude(id)
	}
}

// plan assembles the cheapest live route.
func (o *Originator) plan(ref ModelRef, holders []swarm.ShardHolder, failed map[string]time.Time) ([]Hop, error) {
	var hs []Holder
	for _, h := range holders {
		if h.Shard.Layers != ref.Layers || h.Shard.Hidden != ref.Hidden {
			continue
		}
		rtt := 0.0
		if o.RTT != nil && h.Peer.ID != o.Host.ID() {
			rtt = float64(o.RTT(h.Peer.ID).Microseconds()) / 1000
		}
		hs = append(hs, Holder{Peer: h.Peer.ID.String(), Start: h.Shard.Start, End: h.Shard.End,
			MsPerLayer: h.Shard.MsPerLayer, RTTms: rtt})
	}
	r, err := AssembleRoute(ref.Layers, hs, o.excluded(failed))
	if err != nil {
		return nil, err
	}
	return r.Hops, nil
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
func (o *Originator) Generate(ctx context.Context, req Request) (*GenerateResult, error) {
	start := time.Now()
	if req.DType == "" {
		req.DType = DTypeF32
	}
	if req.DType != DTypeF16 && req.DType != DTypeF32 {
		return nil, fmt.Errorf("pipeline: dtype %q (f16 or f32)", req.DType)
	}
	ref, holders, err := o.Resolve(req.Model)
	if err != nil {
		return nil, err
	}
	failed := map[string]time.Time{}
	hops, err := o.plan(ref, holders, failed)
	if err != nil {
		return nil, err // a gap names the missing layers before anything starts
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
		res: &GenerateResult{Model: ref.Name, ModelCID: ref.CID, PromptTokens: len(prompt), DType: req.DType, Tokens: []int32{}},
		sampler: engine.NewSampler(engine.SamplerOptions{Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK,
			TopP: req.Sampling.TopP, MinP: req.Sampling.MinP, RepeatPenalty: req.Sampling.RepeatPenalty, Seed: req.Sampling.Seed}),
	}
	err = g.run(ctx, hops, start)
	g.res.TotalMS = msSince(start)
	return g.res, err
}

func msSince(t time.Time) float64 { return ms(time.Since(t)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
