package client

import "context"

// BMC is GET /v1/swarm/bmc: the authoritative BMC table and the BMC peers
// this peer listens to.
type BMC struct {
	// Authority is the table in force, null when none is (every allowed
	// BMC silent for longer than FreshForMS); Message then says why.
	Authority  *BMCTable `json:"authority"`
	Message    string    `json:"message,omitempty"`
	FreshForMS int64     `json:"fresh_for_ms"`
	// Peers are the allowed BMC peers (bmc_peers, and this peer when it is
	// a bridge), lowest peer ID first: the authority rule's order.
	Peers []BMCPeer `json:"bmc_peers"`
	// Ignored are peers that published tables but are not in bmc_peers.
	Ignored []BMCPeer `json:"ignored,omitempty"`
	// Bridge is this peer's own bridge, when it has bmc_serial.
	Bridge *BMCBridge `json:"bridge,omitempty"`
}

// BMCPeer is one BMC peer and its last accepted table.
type BMCPeer struct {
	PeerID    string `json:"peer_id"`
	Authority bool   `json:"authority,omitempty"`
	Live      bool   `json:"live"`            // published within the freshness window
	LastMS    int64  `json:"last_ms_ago"`     // -1: never heard from
	Boot      uint32 `json:"boot,omitempty"`  // of its last accepted table
	Seq       uint32 `json:"seq,omitempty"`   // of its last accepted table
	Nodes     int    `json:"nodes,omitempty"` // entries in its last table
	Stale     uint64 `json:"stale_ignored"`   // older or replayed tables it sent that were ignored
}

// BMCTable is a board's table as its bridge published it.
type BMCTable struct {
	Signer      string         `json:"signer"` // the bridge's peer ID
	AgeMS       int64          `json:"age_ms"` // since this peer received it
	Boot        uint32         `json:"boot"`
	Seq         uint32         `json:"seq"`
	UptimeMS    int64          `json:"uptime_ms"`
	DeadAfterMS int64          `json:"dead_after_ms"` // the board's rule: period x misses
	Nodes       []BMCNode      `json:"nodes"`
	Partitions  []BMCPartition `json:"partitions"`
}

// BMCNode is a liveness entry, judged on the board's clock.
type BMCNode struct {
	Handle string `json:"handle"`
	PeerID string `json:"peer_id,omitempty"` // when the bridge could name it
	Alive  bool   `json:"alive"`
	AgeMS  int64  `json:"age_ms"` // since its last heartbeat reached the board, at the dump
	Load   int    `json:"load"`
}

// BMCPartition says a node holds layers [Start, End) of a model.
type BMCPartition struct {
	Node     string `json:"node"`
	PeerID   string `json:"peer_id,omitempty"`
	Model    string `json:"model"`
	ModelCID string `json:"model_cid,omitempty"`
	Start    int    `json:"start"`
	End      int    `json:"end"`
}

// BMCBridge is the state of this peer's serial bridge to its board.
type BMCBridge struct {
	Path          string  `json:"path"`
	Connected     bool    `json:"connected"`
	Boot          uint32  `json:"boot,omitempty"`
	RTTMS         float64 `json:"rtt_ms,omitempty"`    // last PING round trip
	LastPublishMS int64   `json:"last_publish_ms_ago"` // -1: never published
	Published     uint64  `json:"published"`
	Error         string  `json:"error,omitempty"` // last error, cleared by a publication
}

// BMC returns the authoritative BMC table. A peer with no BMC configured
// answers an *APIError with Status 404.
func (c *Client) BMC(ctx context.Context) (BMC, error) {
	var out BMC
	return out, c.get(ctx, "/v1/swarm/bmc", &out)
}
