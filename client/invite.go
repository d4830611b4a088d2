package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
)

// Invite is GET /v1/swarm/invite: a join token for this peer's swarm. The
// token holds the swarm key: whoever has it can join.
type Invite struct {
	Token   string   `json:"token"`
	SwarmID string   `json:"swarm_id"`
	PeerID  string   `json:"peer_id"`
	Addrs   []string `json:"addrs"`
}

// JoinRequest is the body of POST /v1/swarm/join.
type JoinRequest struct {
	Token string `json:"token"`
}

// Joined is the answer to POST /v1/swarm/join.
type Joined struct {
	// SwarmID names the swarm joined; Previous the one left ("" when the
	// key did not change).
	SwarmID  string `json:"swarm_id"`
	Previous string `json:"previous_swarm_id,omitempty"`
	// Bootstrap is the inviting peer's addresses, kept in the data dir
	// as bootstrap peers.
	Bootstrap []string `json:"bootstrap"`
	// Restarting is true when the peer restarts its network with the
	// new key (its API comes back on the same address).
	Restarting bool `json:"restarting"`
}

// Invite fetches a join token for the peer's swarm (GET /v1/swarm/invite).
func (c *Client) Invite(ctx context.Context) (Invite, error) {
	var out Invite
	return out, c.get(ctx, "/v1/swarm/invite", &out)
}

// Join makes the peer join the swarm of token (POST /v1/swarm/join).
func (c *Client) Join(ctx context.Context, token string) (Joined, error) {
	var out Joined
	b, err := json.Marshal(JoinRequest{Token: token})
	if err != nil {
		return out, err
	}
	return out, c.do(ctx, http.MethodPost, "/v1/swarm/join", bytes.NewReader(b), &out)
}
