package node

import (
	"context"
	"errors"
	"strings"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/moa"
)

// AddRole loads the GGUF at path and serves it as role, while the peer
// runs (POST /v1/swarm/roles): counted against max_memory, announced from
// the next heartbeat. A role already served is replaced once the new
// model is up; its requests running finish on the old one.
func (n *Node) AddRole(ctx context.Context, role, path string) (client.Role, error) {
	if n.Swarm() == nil {
		return client.Role{}, ErrNotRunning
	}
	if !moa.IsRole(role) {
		return client.Role{}, badRequest("unknown role %q (roles: %s)", role, strings.Join(moa.Roles, ", "))
	}
	if path == "" {
		return client.Role{}, badRequest("role %s: no model file (path)", role)
	}
	defer n.publishPS("roles")
	n.runMu.Lock()
	defer n.runMu.Unlock()
	old := n.servedRole(role)
	if old != nil && old.Model.Info().Path == path {
		return client.Role(old.Capability()), nil
	}
	rm, err := n.loadRole(ctx, role, path)
	if err != nil {
		if errors.Is(err, errNoMemory) {
			return client.Role{}, answer.Wrap(answer.NoMemory, err)
		}
		return client.Role{}, answer.Wrap(answer.BadRequest, err)
	}
	if old != nil {
		n.removeRole(role) // its requests running finish on it
	}
	n.moaServer.Add(rm)
	return client.Role(rm.Capability()), nil
}

// RemoveRole stops serving role (DELETE /v1/swarm/roles/ROLE): no new
// request reaches it; those running finish, then its model is unloaded
// (unless another role shares it) and its memory given back.
func (n *Node) RemoveRole(role string) error {
	if n.Swarm() == nil {
		return ErrNotRunning
	}
	defer n.publishPS("roles")
	n.runMu.Lock()
	defer n.runMu.Unlock()
	return n.removeRole(role)
}

func (n *Node) removeRole(role string) error {
	rm := n.servedRole(role)
	served, freed := n.moaServer.Remove(role)
	if !served {
		return answer.Errorf(answer.NotFound, "role %s is not served here", role)
	}
	n.log.Info("role no longer served", "role", role)
	if freed != nil {
		go func() {
			<-freed
			n.mem.releaseModel(rm.Model)
		}()
	}
	return nil
}

// servedRole is the model serving role here, or nil.
func (n *Node) servedRole(role string) *moa.RoleModel {
	for _, rm := range n.moaServer.Models() {
		if rm.Role == role {
			return rm
		}
	}
	return nil
}
