package moa

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

// RoleModel is a loaded whole model serving one role.
type RoleModel struct {
	Role      string
	Model     *engine.Model
	CID       string
	Name      string
	Quant     string
	TokPerSec float64 // measured decode speed

	active atomic.Int32
}

// LoadRole loads the GGUF at path to serve role, names it by its root and
// measures its decode speed with a short generation.
func LoadRole(ctx context.Context, role, path string, opts engine.Options) (*RoleModel, error) {
	// A role is named by its model's root, so a challenger can check it
	// against weights verified the same way as a pipeline's.
	_, _, root, err := shards.BuildManifest(path)
	if err != nil {
		return nil, err
	}
	return LoadRoleNamed(ctx, role, path, root.String(), opts)
}

// LoadRoleNamed is LoadRole for a file whose root the caller has (a store
// keeps it), so the file is not read twice.
func LoadRoleNamed(ctx context.Context, role, path, root string, opts engine.Options) (*RoleModel, error) {
	if !IsRole(role) {
		return nil, fmt.Errorf("moa: unknown role %q (roles: %v)", role, Roles)
	}
	info, err := shards.ReadModelInfo(path)
	if err != nil {
		return nil, err
	}
	if info.LayerRange != [2]int{0, info.Layers} || !info.HasEmbedding || !info.HasHead {
		return nil, fmt.Errorf("moa: %s holds layers [%d,%d) of %d: a role needs the whole model",
			path, info.LayerRange[0], info.LayerRange[1], info.Layers)
	}
	m, err := engine.Load(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	rm := &RoleModel{Role: role, Model: m, CID: root, Name: info.Name, Quant: info.Quant}
	if rm.TokPerSec, err = measureSpeed(ctx, m); err != nil {
		m.Close()
		return nil, fmt.Errorf("moa: measuring %s: %w", path, err)
	}
	return rm, nil
}

// As serves the same loaded model under another role: one GGUF given for
// several roles is loaded, hashed and measured once.
func (rm *RoleModel) As(role string) (*RoleModel, error) {
	if !IsRole(role) {
		return nil, fmt.Errorf("moa: unknown role %q (roles: %v)", role, Roles)
	}
	return &RoleModel{Role: role, Model: rm.Model, CID: rm.CID, Name: rm.Name, Quant: rm.Quant, TokPerSec: rm.TokPerSec}, nil
}

// measureSpeed runs a short greedy generation and returns decode tok/s.
func measureSpeed(ctx context.Context, m *engine.Model) (float64, error) {
	res, err := m.Generate(ctx, engine.Request{Prompt: "The swarm measures its speed.", MaxTokens: 12}, nil)
	if err != nil {
		return 0, err
	}
	if res.Metrics.DecodeTPS > 0 {
		return res.Metrics.DecodeTPS, nil
	}
	if res.Metrics.Prefill > 0 {
		return float64(res.Metrics.PromptTokens) / res.Metrics.Prefill.Seconds(), nil
	}
	return 0, nil
}

// Capability is how the role is announced.
func (rm *RoleModel) Capability() gossip.Role {
	return gossip.Role{Role: rm.Role, ModelCID: rm.CID, ModelName: rm.Name, Quant: rm.Quant, TokPerSec: rm.TokPerSec,
		Context: rm.Model.Options().Context, Vocab: rm.Model.Tokenizer().Fingerprint(), Backend: rm.Model.Backend()}
}

// Close unloads the model.
func (rm *RoleModel) Close() error { return rm.Model.Close() }
