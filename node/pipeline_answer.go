package node

import (
	"context"
	"errors"
	"slices"
	"sort"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// answerPipeline runs a query through a pipeline of shard holders.
func (n *Node) answerPipeline(ctx context.Context, q querySpec) (*outcome, error) {
	n.mu.Lock()
	o := n.pipeOrig
	n.mu.Unlock()
	if o == nil {
		return nil, answer.Wrap(answer.Unavailable, errors.New("peer is shutting down"))
	}
	var msgs []engine.Message
	for _, m := range q.history {
		msgs = append(msgs, engine.Message{Role: m.Role, Content: m.Content})
	}
	msgs = append(msgs, engine.Message{Role: "user", Content: q.prompt})
	think := false
	req := pipeline.Request{Model: q.model, Messages: msgs, Think: &think, MaxTokens: q.maxTokens, Sampling: q.sampling,
		DType: q.dtype, OnToken: q.onToken, OnReasoning: q.onReasoning, Standby: n.cfg.Pipeline.Standby}
	if q.mode == answer.ModeComplete {
		// A raw completion: the text tokenized as it is.
		req.Messages, req.Think, req.Prompt = nil, nil, q.prompt
	}
	if q.standby != nil {
		req.Standby = *q.standby
	}
	req.Speculate = n.cfg.Pipeline.Draft != "" || n.cfg.Pipeline.DraftSwarm
	req.DraftMin, req.DraftMax = n.cfg.Pipeline.DraftMin, n.cfg.Pipeline.DraftMax
	if q.speculate != nil {
		req.Speculate = *q.speculate
	}
	if q.onTrace != nil {
		req.OnTrace = func(ev answer.Trace) { q.onTrace("trace", ev) }
	}
	if q.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, q.timeout)
		defer cancel()
	}
	n.learnHolders(ctx, q.model)
	res, err := o.Generate(ctx, req)
	if err != nil {
		var gap *pipeline.GapError
		switch {
		case errors.Is(err, pipeline.ErrAmbiguousModel), errors.Is(err, engine.ErrNoChatTemplate), errors.Is(err, engine.ErrChatTemplate):
			return nil, answer.Wrap(answer.BadRequest, err)
		case errors.Is(err, pipeline.ErrNoModel) && q.model != "":
			// The model named is held by no live peer: as plan says.
			return nil, answer.Wrap(answer.ModelNotFound, err)
		case errors.As(err, &gap), errors.Is(err, pipeline.ErrNoModel):
			return nil, answer.Wrap(answer.NoRoute, err)
		case errors.Is(err, pipeline.ErrUnchecked):
			return nil, answer.Wrap(answer.Unchecked, err)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, answer.Errorf(answer.Timeout, "pipeline: no answer within %s: %w", q.timeout, err)
		case errors.Is(err, context.Canceled):
			return nil, answer.Wrap(answer.Cancelled, err)
		}
		return nil, answer.Wrap(answer.PipelineFailed, err)
	}
	if m := n.metrics; m != nil {
		m.failovers.Add(float64(len(res.Reroutes)))
		m.checked.Add(float64(res.SpotChecked))
		m.mismatch.Add(float64(res.Mismatches))
		if res.CheckLost != nil {
			m.lost.Add(float64(res.CheckLost.Steps))
		}
	}
	out := &outcome{final: res.Text, promptToks: res.PromptTokens, genToks: len(res.Tokens), finish: "stop"}
	if res.Done == "length" {
		out.finish = "length"
	}
	out.result = pipelineResult(q.prompt, res)
	return out, nil
}

// pipelineResult is the query body of a pipeline generation.
func pipelineResult(prompt string, res *answer.Pipeline) *answer.Result {
	return &answer.Result{Query: prompt, Mode: "pipeline", FinalAnswer: res.Text, Reasoning: res.Reasoning, TotalTimeMS: res.TotalMS,
		AgentResponses: []answer.Agent{}, Pipeline: res}
}

// hasPipelineModel reports whether some live peer announces shards.
func (n *Node) hasPipelineModel() bool {
	s := n.Swarm()
	if s == nil {
		return false
	}
	for _, p := range s.View().Peers() {
		if p.Alive && len(p.Cap.Shards) > 0 {
			return true
		}
	}
	return false
}

// hasRoles reports whether some live peer serves an answering role.
func (n *Node) hasRoles() bool {
	s := n.Swarm()
	if s == nil {
		return false
	}
	for _, r := range moa.Roles {
		if r != moa.Spotter && r != moa.Aggregator && len(s.View().ByRole(r)) > 0 {
			return true
		}
	}
	return false
}

// Shards is what GET /v1/swarm/shards answers: who holds which layers of
// each model, and what is not covered by live peers.
func (n *Node) Shards() (client.Shards, error) {
	s := n.Swarm()
	if s == nil {
		return client.Shards{}, ErrNotRunning
	}
	models := map[string]*client.ModelShards{}
	for _, p := range s.View().Peers() {
		for _, sh := range p.Cap.Shards {
			m := models[sh.ModelCID]
			if m == nil {
				m = &client.ModelShards{ModelCID: sh.ModelCID, Name: sh.ModelName, Layers: sh.Layers, Holders: []client.ShardHolder{}}
				models[sh.ModelCID] = m
			}
			m.Holders = append(m.Holders, client.ShardHolder{PeerID: p.ID.String(), Alive: p.Alive && !n.excluded(p.ID),
				Start: sh.Start, End: sh.End, MsPerLayer: sh.MsPerLayer, MemBytes: sh.MemBytes})
		}
	}
	out := client.Shards{Models: []client.ModelShards{}}
	for _, m := range models {
		var hs []pipeline.Holder
		for _, h := range m.Holders {
			hs = append(hs, pipeline.Holder{Peer: h.PeerID, Start: h.Start, End: h.End})
		}
		alive := map[string]bool{}
		for _, h := range m.Holders {
			alive[h.PeerID] = alive[h.PeerID] || h.Alive
		}
		gaps := pipeline.Coverage(m.Layers, hs, func(p string) bool { return !alive[p] })
		m.Gaps = [][2]int{}
		for _, g := range gaps {
			m.Gaps = append(m.Gaps, g)
		}
		m.Covered = len(gaps) == 0
		slices.SortFunc(m.Holders, func(x, y client.ShardHolder) int { return x.Start - y.Start })
		out.Models = append(out.Models, *m)
	}
	sort.Slice(out.Models, func(i, j int) bool { return out.Models[i].Name < out.Models[j].Name })
	return out, nil
}

// Plan is what GET /v1/swarm/plan?model=NAME|CID answers: the placement
// the partitioner recommends over the live peers. An unknown model's
// kind is answer.ModelNotFound, an ambiguous one's answer.BadRequest; no
// possible placement is answer.NoPlan.
// The model's shape, its head and embedding included, comes from its
// manifest when it has one (fetched from a holder as a generation does).
func (n *Node) Plan(model string) (client.Plan, error) {
	s, h := n.Swarm(), n.Host()
	if s == nil || h == nil {
		return client.Plan{}, ErrNotRunning
	}
	n.mu.Lock()
	o := n.pipeOrig
	n.mu.Unlock()
	if o == nil {
		return client.Plan{}, ErrNotRunning
	}
	ref, holders, err := o.Resolve(model)
	switch {
	case errors.Is(err, pipeline.ErrAmbiguousModel):
		return client.Plan{}, answer.Wrap(answer.BadRequest, err)
	case err != nil:
		return client.Plan{}, answer.Wrap(answer.ModelNotFound, err)
	}
	devs, shape := planInputs(s, h, n.excluded, ref, holders)
	p, err := pipeline.Partition(devs, shape)
	if err != nil {
		return client.Plan{}, answer.Wrap(answer.NoPlan, err)
	}
	out := client.Plan{ModelCID: ref.CID, Name: ref.Name, Layers: ref.Layers, LayerBytes: shape.LayerBytes,
		HeadLayers: shape.Ends.Head, EmbedLayers: shape.Ends.Embed, HeadBytes: shape.HeadBytes, EmbedBytes: shape.EmbedBytes,
		BottleneckMS: p.BottleneckMs, LatencyMS: p.LatencyMs, Unused: map[string]string{}}
	for _, st := range p.Stages {
		out.Stages = append(out.Stages, client.PlanStage{PeerID: st.Device, Start: st.Start, End: st.End, StageMS: st.StageMs,
			HeadMS: st.HeadMs, EmbedMS: st.EmbedMs})
	}
	for _, u := range p.Unused {
		out.Unused[u] = p.UnusedReasons[u]
	}
	for _, d := range devs {
		out.Devices = append(out.Devices, client.PlanDevice{PeerID: d.ID, MemBytes: d.MemBytes, MsPerLayer: d.MsPerLayer, RTTMS: d.RTTms})
	}
	return out, nil
}

// planInputs describes every live peer as a pipeline device: memory free
// for weights (three quarters of its free RAM), its measured ms per layer
// of this model (or, if it holds none, the median of those who do), and the
// round trip to it. The shape is the manifest's; a model without one gets
// its layer size from a holder of a middle range if any (a first or last
// shard's bytes include the embedding or the head), and no end costs.
func planInputs(sw *swarm.Service, h host.Host, excluded func(peer.ID) bool, ref pipeline.ModelRef,
	holders []swarm.ShardHolder) ([]pipeline.Device, pipeline.ModelShape) {
	shape := ref.Shape
	fromManifest := shape.Layers > 0
	if !fromManifest {
		shape = pipeline.ModelShape{Layers: ref.Layers, HiddenBytesPerToken: int64(2 * ref.Hidden)}
	}
	speed := map[string]float64{}
	var known []float64
	middle := false
	for _, h := range holders {
		if h.Shard.MsPerLayer > 0 {
			speed[h.Peer.ID.String()] = h.Shard.MsPerLayer
			known = append(known, h.Shard.MsPerLayer)
		}
		n := h.Shard.End - h.Shard.Start
		if fromManifest || n <= 0 || h.Shard.MemBytes <= 0 {
			continue
		}
		if isMiddle := h.Shard.Start > 0 && h.Shard.End < ref.Layers; shape.LayerBytes == 0 || isMiddle && !middle {
			shape.LayerBytes, middle = h.Shard.MemBytes/int64(n), isMiddle
		}
	}
	slices.Sort(known)
	median := 0.0
	if len(known) > 0 {
		median = known[len(known)/2]
	}
	var devs []pipeline.Device
	for _, p := range sw.View().Peers() {
		if !p.Alive || excluded(p.ID) {
			continue
		}
		ms, ok := speed[p.ID.String()]
		if !ok {
			ms = median
		}
		rtt := 0.0
		if !p.Self {
			rtt = float64(h.Peerstore().LatencyEWMA(p.ID).Microseconds()) / 1000
		}
		free := p.Cap.Platform.FreeRAM
		if free == 0 {
			free = p.Cap.Platform.RAMBytes / 2
		}
		devs = append(devs, pipeline.Device{ID: p.ID.String(), MemBytes: int64(free) * 3 / 4, MsPerLayer: ms, RTTms: rtt})
	}
	return devs, shape
}

// learnHolders looks up the holders of a model this peer's table holds
// none of (swarm.Service.EnsureHolders): in a swarm larger than the
// samples a newcomer got, the holders may not be in its table yet.
func (n *Node) learnHolders(ctx context.Context, model string) {
	s := n.Swarm()
	if s == nil {
		return
	}
	if got, err := s.EnsureHolders(ctx, model); err != nil {
		n.log.Debug("no holders of the model found in the DHT", "model", model, "err", err)
	} else if got > 0 {
		n.log.Info("holders of the model found in the DHT", "model", model, "peers", got)
	}
}
