package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

// Shard is a loaded stage slice: layers [Start,End) of a model.
type Shard struct {
	ModelCID   string
	Name       string
	Quant      string
	Start, End int
	Layers     int
	Hidden     int
	Path       string
	Model      *engine.Model
	MemBytes   int64
	MsPerLayer float64

	private bool // loaded to settle a dispute: served to this peer's routes, not announced (settle.go)
}

// LoadShard loads the stage file at path, which holds layers [a,b) of the
// model whose CID is modelCID, and measures its decode cost per layer.
func LoadShard(ctx context.Context, path, modelCID string, a, b int, opts engine.Options) (*Shard, error) {
	info, err := shards.ReadModelInfo(path)
	if err != nil {
		return nil, err
	}
	if a < info.LayerRange[0] || b > info.LayerRange[1] || a >= b {
		return nil, fmt.Errorf("pipeline: %s holds layers [%d,%d), not [%d,%d)", path, info.LayerRange[0], info.LayerRange[1], a, b)
	}
	m, err := engine.Load(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	sh := &Shard{ModelCID: modelCID, Name: info.Name, Quant: info.Quant, Start: a, End: b, Layers: info.Layers,
		Hidden: info.Hidden, Path: path, Model: m, MemBytes: m.Memory().Weights}
	if sh.MsPerLayer, err = measureLayers(ctx, sh); err != nil {
		m.Close()
		return nil, fmt.Errorf("pipeline: measuring %s: %w", path, err)
	}
	return sh, nil
}

// measureLayers times single-token decode steps through the shard's layers
// (median of 5 after a warm-up) and returns milliseconds per layer.
func measureLayers(ctx context.Context, sh *Shard) (float64, error) {
	s, err := sh.Model.NewSession()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	var times []time.Duration
	for i := 0; i < 6; i++ {
		var tokens []int32
		var hidden []float32
		if sh.Start == 0 {
			tokens = []int32{int32(r.IntN(max(sh.Model.Info().VocabSize, 1)))}
		} else {
			hidden = make([]float32, sh.Hidden)
			for j := range hidden {
				hidden[j] = float32(r.NormFloat64())
			}
		}
		t0 := time.Now()
		if _, err := s.RunRange(ctx, sh.Start, sh.End, tokens, hidden); err != nil {
			return 0, err
		}
		if i > 0 {
			times = append(times, time.Since(t0))
		}
	}
	med := median(times)
	return float64(med.Microseconds()) / 1000 / float64(sh.End-sh.Start), nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

// Capability is how the shard is announced.
func (sh *Shard) Capability() gossip.Shard {
	return gossip.Shard{ModelCID: sh.ModelCID, ModelName: sh.Name, Quant: sh.Quant, Start: sh.Start, End: sh.End,
		Layers: sh.Layers, Hidden: sh.Hidden, MemBytes: sh.MemBytes, MsPerLayer: sh.MsPerLayer, Backend: sh.Model.Backend()}
}

// holds reports whether the shard can run layers [a,b) of model.
func (sh *Shard) holds(model string, a, b int) bool {
	return sh.ModelCID == model && sh.Start <= a && b <= sh.End
}
