package client

import (
	"context"
	"net/url"
)

// Shards is GET /v1/swarm/shards.
type Shards struct {
	Models []ModelShards `json:"models"`
}

// ModelShards is who holds which layers of one model.
type ModelShards struct {
	ModelCID string        `json:"model_cid"`
	Name     string        `json:"name"`
	Layers   int           `json:"layers"`
	Holders  []ShardHolder `json:"holders"`
	Covered  bool          `json:"covered"` // live holders cover every layer
	Gaps     [][2]int      `json:"gaps"`    // layer ranges no live peer holds
}

// ShardHolder is one peer's range.
type ShardHolder struct {
	PeerID     string  `json:"peer_id"`
	Alive      bool    `json:"alive"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	MsPerLayer float64 `json:"ms_per_layer"`
	MemBytes   int64   `json:"mem_bytes"`
}

// Plan is GET /v1/swarm/plan.
type Plan struct {
	ModelCID   string `json:"model_cid"`
	Name       string `json:"name"`
	Layers     int    `json:"layers"`
	LayerBytes int64  `json:"layer_bytes"`
	// HeadLayers and EmbedLayers are what the output head (with the final
	// norm) and the embedding lookup cost per token, in layers' time; the
	// bytes are what they take on the last and first stage. All 0 when
	// the model has no manifest to tell them.
	HeadLayers   float64           `json:"head_layers"`
	EmbedLayers  float64           `json:"embed_layers"`
	HeadBytes    int64             `json:"head_bytes"`
	EmbedBytes   int64             `json:"embed_bytes"`
	Stages       []PlanStage       `json:"stages"`
	BottleneckMS float64           `json:"bottleneck_ms"`
	LatencyMS    float64           `json:"latency_ms"`
	Unused       map[string]string `json:"unused"`
	Devices      []PlanDevice      `json:"devices"`
}

// PlanStage is one recommended stage.
type PlanStage struct {
	PeerID  string  `json:"peer_id"`
	Start   int     `json:"start"`
	End     int     `json:"end"`
	StageMS float64 `json:"stage_ms"`
	HeadMS  float64 `json:"head_ms,omitempty"`  // of StageMS, the head's (last stage)
	EmbedMS float64 `json:"embed_ms,omitempty"` // of StageMS, the embedding's (first stage)
}

// PlanDevice is a peer as the partitioner saw it.
type PlanDevice struct {
	PeerID     string  `json:"peer_id"`
	MemBytes   int64   `json:"mem_bytes"`
	MsPerLayer float64 `json:"ms_per_layer"`
	RTTMS      float64 `json:"rtt_ms"`
}

// Shards returns who holds which layers.
func (c *Client) Shards(ctx context.Context) (Shards, error) {
	var out Shards
	return out, c.get(ctx, "/v1/swarm/shards", &out)
}

// Plan returns the recommended placement of a model.
func (c *Client) Plan(ctx context.Context, model string) (Plan, error) {
	var out Plan
	return out, c.get(ctx, "/v1/swarm/plan?model="+url.QueryEscape(model), &out)
}
