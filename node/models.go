package node

import (
	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/moa"
)

// Model names the OpenAI API accepts besides roles and model names.
const (
	ModelAuto  = "swarm"
	ModelMoA   = "swarm-moa"
	ModelSpeed = "swarm-speed"
)

// ResolveModel maps a model name (the OpenAI API's model field) to a
// query mode and model: swarm, swarm-moa, swarm-speed, a role name, or the
// name or CID of a model some live peer serves as a role or in layers. An
// unknown name is an answer.ModelNotFound error.
func (n *Node) ResolveModel(name string) (mode, model string, err error) {
	switch name {
	case "", ModelAuto:
		return "auto", "", nil
	case ModelMoA:
		return string(moa.ModeMoA), "", nil
	case ModelSpeed:
		return string(moa.ModeSpeed), "", nil
	}
	if moa.IsRole(name) {
		return name, "", nil
	}
	if s := n.Swarm(); s != nil {
		for _, p := range s.View().Peers() {
			if !p.Alive {
				continue
			}
			for _, r := range p.Cap.Roles {
				if r.ModelName == name || r.ModelCID == name {
					return r.Role, name, nil // that role, on peers running that model
				}
			}
		}
		for _, p := range s.View().Peers() {
			if !p.Alive {
				continue
			}
			for _, sh := range p.Cap.Shards {
				if sh.ModelName == name || sh.ModelCID == name {
					return "pipeline", name, nil
				}
			}
		}
	}
	return "", "", answer.Errorf(answer.ModelNotFound, "model %q not found: use swarm, swarm-moa, swarm-speed, a role name, or a model listed by GET /v1/models (role models and pipeline models)", name)
}

// Models is what GET /v1/models lists: the swarm modes, every role served
// by a live peer, every model name those roles run, and every model live
// peers hold layers of (answered by pipeline).
func (n *Node) Models() []client.ModelInfo {
	var data []client.ModelInfo
	for _, m := range []string{ModelAuto, ModelMoA, ModelSpeed} {
		data = append(data, client.ModelInfo{ID: m, Object: "model", OwnedBy: "swarm"})
	}
	s := n.Swarm()
	if s == nil {
		return data
	}
	seen := map[string]bool{}
	for _, role := range moa.Roles {
		for _, h := range s.View().ByRole(role) {
			if !seen[role] {
				seen[role] = true
				data = append(data, client.ModelInfo{ID: role, Object: "model", OwnedBy: "swarm-role"})
			}
			if name := h.Role.ModelName; name != "" && !seen[name] {
				seen[name] = true
				data = append(data, client.ModelInfo{ID: name, Object: "model", OwnedBy: h.Peer.ID.String()})
			}
		}
	}
	for _, p := range s.View().Peers() {
		for _, sh := range p.Cap.Shards {
			name := sh.ModelName
			if name == "" {
				name = sh.ModelCID
			}
			if p.Alive && !seen[name] {
				seen[name] = true
				data = append(data, client.ModelInfo{ID: name, Object: "model", OwnedBy: "swarm-pipeline"})
			}
		}
	}
	return data
}
