package mobile

import (
	"context"
	"fmt"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/node"
)

// Invite is a join token for this peer's swarm as JSON, as GET
// /v1/swarm/invite answers: {"token", "swarm_id", "peer_id", "addrs"}.
// The token is a secret (it holds the swarm key): show it only to the
// user, e.g. as a QR code for another phone to scan. A peer is private by
// default: its first Start created a key of its own.
func (m *Node) Invite() (string, error) {
	n := m.node()
	if n == nil {
		return "", errStopped
	}
	v, err := n.Invite()
	return encode(v, err)
}

// Join makes this peer a member of the swarm of token (from another
// peer's Invite or swarmctl invite), and answers as POST /v1/swarm/join
// does: {"swarm_id", "previous_swarm_id", "bootstrap", "restarting"}. A
// new key restarts the peer in place, on the same config and data dir,
// before Join returns; requests running end with an error. A bad token is
// an error that says what is wrong with it.
func (m *Node) Join(token string) (string, error) {
	m.joinMu.Lock()
	defer m.joinMu.Unlock()
	n := m.node()
	if n == nil {
		return "", errStopped
	}
	j, err := n.Join(m.ctx, token)
	if err != nil {
		return "", fmt.Errorf("mobile: join: %w", err)
	}
	if j.Restarting {
		if err := m.restart(n); err != nil {
			return "", err
		}
	}
	return encode(j, nil)
}

// restart replaces old by a new peer on its config: its libp2p host takes
// the new key when it is made.
func (m *Node) restart(old *node.Node) error {
	cfg := old.RestartConfig()
	old.Close()
	next := &node.Node{Config: cfg, Logger: m.log.slogger()}
	next.API = api.New(next, next.Logger)
	if err := next.Start(context.Background()); err != nil {
		next.Close()
		m.Stop()
		return fmt.Errorf("mobile: join: restarting with the new swarm key: %w (the peer is stopped; Start it again)", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		next.Close() // Stop came while it restarted
		return errStopped
	}
	m.n = next
	return nil
}
