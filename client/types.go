// Package client is the Go client of swarmd's local HTTP API, and the
// API's JSON types. swarmctl links only this package: it must not import
// libp2p, cgo or any other package of this module.
package client

// ID is GET /v1/swarm/id.
type ID struct {
	PeerID   string   `json:"peer_id"`
	Addrs    []string `json:"addrs"`
	Version  string   `json:"version"`
	Platform Platform `json:"platform"`
	Private  bool     `json:"private"` // member of a private (swarm.key) network
	// SwarmID is a short name of the swarm key (node.SwarmID).
	SwarmID string `json:"swarm_id,omitempty"`
}

// Platform describes a device.
type Platform struct {
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Device   string `json:"device,omitempty"`
	Cores    int    `json:"cores"`
	RAMBytes uint64 `json:"ram_bytes"`
	FreeRAM  uint64 `json:"free_ram_bytes,omitempty"`
	GPUs     []GPU  `json:"gpus,omitempty"`
}

// GPU is a GPU a peer computes on.
type GPU struct {
	Backend   string `json:"backend"`
	Name      string `json:"name"`
	VRAMBytes uint64 `json:"vram_bytes"`
	FreeVRAM  uint64 `json:"free_vram_bytes,omitempty"`
}

// GPUStatus is what this peer found of GPUs at start.
type GPUStatus struct {
	// Dirs are the folders GPU backends were looked for in (config
	// engine.gpu_libs); Loaded the backends that loaded ("Vulkan").
	Dirs   []string `json:"dirs"`
	Loaded []string `json:"loaded,omitempty"`
	// Devices are the GPUs they found, with their memory now.
	Devices []GPUDevice `json:"devices,omitempty"`
	// Layers is config engine.gpu_layers: -1 as many as fit, 0 none.
	Layers int `json:"gpu_layers"`
}

// GPUDevice is one GPU.
type GPUDevice struct {
	Backend     string `json:"backend"`
	Name        string `json:"name"`
	Description string `json:"description"`
	TotalBytes  uint64 `json:"total_bytes"`
	FreeBytes   uint64 `json:"free_bytes"`
	// HeldBytes is what this peer's models hold on it.
	HeldBytes int64 `json:"held_bytes"`
}

// Peers is GET /v1/swarm/peers.
type Peers struct {
	Peers []Peer `json:"peers"`
}

// Peer is one row of the peer table.
type Peer struct {
	PeerID     string   `json:"peer_id"`
	Self       bool     `json:"self"`
	Alive      bool     `json:"alive"`
	Connected  bool     `json:"connected"`
	LastSeenMS int64    `json:"last_seen_ms_ago"`
	DeadForMS  int64    `json:"dead_for_ms,omitempty"`
	Version    string   `json:"version,omitempty"`
	Addrs      []string `json:"addrs,omitempty"`
	Platform   Platform `json:"platform"`
	Queued     int      `json:"queued,omitempty"`
	Roles      []Role   `json:"roles,omitempty"`
	Shards     []Shard  `json:"shards,omitempty"`
	Active     int      `json:"active"`
	Capacity   int      `json:"capacity"`
	Thermal    string   `json:"thermal,omitempty"`
	Battery    *Battery `json:"battery,omitempty"`
	// Relay: it offers circuit relay v2 (its identify lists the relay
	// protocol; known for peers this one has been connected to).
	Relay bool `json:"relay,omitempty"`
	// Conns are this peer's open connections to it.
	Conns []Conn `json:"conns,omitempty"`
	// RTTMS is the round-trip time to it (moving average of pings).
	RTTMS float64 `json:"rtt_ms,omitempty"`
}

// Conn is one open connection to a peer.
type Conn struct {
	Addr string `json:"addr"` // the remote multiaddr
	// Kind is "direct", "punched" (direct, made by a hole punch through
	// both NATs) or "relayed" (through a circuit relay: limited in time and
	// bytes by the relay).
	Kind      string `json:"kind"`
	Direction string `json:"direction"` // "inbound" or "outbound"
}

// Role is a model serving a Mixture-of-Agents role.
type Role struct {
	Role      string  `json:"role"`
	ModelCID  string  `json:"model_cid"`
	ModelName string  `json:"model_name,omitempty"`
	Quant     string  `json:"quant,omitempty"`
	TokPerSec float64 `json:"tok_s,omitempty"`
	Context   int     `json:"context,omitempty"`
	Vocab     string  `json:"vocab,omitempty"` // tokenizer fingerprint
	Backend   string  `json:"backend,omitempty"`
}

// Shard is layers [Start,End) of a model.
type Shard struct {
	ModelCID   string  `json:"model_cid"`
	ModelName  string  `json:"model_name,omitempty"`
	Quant      string  `json:"quant,omitempty"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	Layers     int     `json:"layers"`
	Hidden     int     `json:"hidden,omitempty"`
	MemBytes   int64   `json:"mem_bytes,omitempty"`
	MsPerLayer float64 `json:"ms_per_layer,omitempty"`
	// Backend is where the peer runs the shard's layers: "CPU", or a GPU
	// backend with its share of them ("Vulkan 8/8+head").
	Backend string `json:"backend,omitempty"`
}

// Battery state where the device exposes it.
type Battery struct {
	Percent  int  `json:"percent"`
	Charging bool `json:"charging"`
}

// Status is GET /v1/swarm/status.
type Status struct {
	PeerID      string   `json:"peer_id"`
	Version     string   `json:"version"`
	UptimeS     float64  `json:"uptime_s"`
	PeersKnown  int      `json:"peers_known"`
	PeersAlive  int      `json:"peers_alive"`
	Connections int      `json:"connections"`
	DHTMode     string   `json:"dht_mode"`
	DHTPeers    int      `json:"dht_routing_table"`
	MDNS        bool     `json:"mdns"`
	Private     bool     `json:"private"`
	SwarmID     string   `json:"swarm_id,omitempty"`
	HeartbeatMS int64    `json:"heartbeat_ms"`
	DeadAfterMS int64    `json:"dead_after_ms"`
	Bootstrap   int      `json:"bootstrap_peers"`
	ListenAddrs []string `json:"listen_addrs"`
	// Warnings are the peer's health problems now (an unreachable bootstrap
	// peer, no mDNS, an identity key others can read), one sentence each.
	Warnings []string `json:"warnings"`
	// Queue is the requests waiting for a free slot on this peer's models.
	Queue Queue `json:"queue"`
	// NAT is what this peer knows of its reachability.
	NAT NATStatus `json:"nat"`
	// Power is the device's power state and whether the peer takes work.
	Power PowerStatus `json:"power"`
	// Memory is the serving budget (config max_memory) and what the
	// loaded roles and shards take of it.
	Memory MemoryStatus `json:"memory"`
	// Tasks are the pulls, fetches and loads running now or ended in the
	// last minute.
	Tasks []Task `json:"tasks"`
	// Ledger sums this peer's accounts of give and take.
	Ledger LedgerSummary `json:"ledger"`
	// GPU is the GPUs this peer found and computes on.
	GPU GPUStatus `json:"gpu"`
}

// RoleRequest is the body of POST /v1/swarm/roles: serve Role with the
// GGUF at Path (a file on the peer's machine).
type RoleRequest struct {
	Role string `json:"role"`
	Path string `json:"path"`
	// Stream: answer with server-sent "task" events (the load's
	// progress), then "result" (Role) or "error".
	Stream bool `json:"stream,omitempty"`
}

// ShardRequest is the body of POST /v1/swarm/shards: serve Shard,
// "PATH.gguf:A-B" (a file on the peer's machine) or "MODEL_CID:A-B"
// (fetched from a peer).
type ShardRequest struct {
	Shard string `json:"shard"`
	// Stream: answer with server-sent "task" events (the fetch's, the
	// slice's and the load's progress), then "result" (Shard) or "error".
	Stream bool `json:"stream,omitempty"`
}

// PS is GET /v1/swarm/ps: the models this peer has loaded.
type PS struct {
	// Models are what the peer serves: its role models and shards.
	Models []Loaded `json:"models"`
	// References are the one-layer slices loaded to check other peers'
	// claims (challenge references): not served, but they take memory.
	References []Loaded     `json:"references,omitempty"`
	Memory     MemoryStatus `json:"memory"`
}

// Loaded is one model in memory: a role model (serving one or more
// roles), a shard, or a one-layer reference loaded to check others.
type Loaded struct {
	Kind     string   `json:"kind"` // role, shard (in PS.Models) or reference (in PS.References)
	Roles    []string `json:"roles,omitempty"`
	Name     string   `json:"name,omitempty"`
	ModelCID string   `json:"model_cid"`
	Path     string   `json:"path"`
	Quant    string   `json:"quant,omitempty"`
	Start    int      `json:"start"` // layers [start,end) the file holds
	End      int      `json:"end"`
	// WeightsBytes is held by the weights; KVBytes by the KV caches
	// allocated so far (a slot's on its first use, kept for reuse), up to
	// Slots x KVPerSessionBytes.
	WeightsBytes      int64 `json:"weights_bytes"`
	KVBytes           int64 `json:"kv_bytes"`
	KVPerSessionBytes int64 `json:"kv_per_session_bytes"`
	Context           int   `json:"context"`
	Sessions          int   `json:"sessions"` // open now
	Slots             int   `json:"slots"`
	Queued            int   `json:"queued"`
	// TokPerSec (roles) and MsPerLayer (shards): measured at load.
	TokPerSec  float64 `json:"tok_s,omitempty"`
	MsPerLayer float64 `json:"ms_per_layer,omitempty"`
	// Batched: sessions' steps share graphs (false: each session runs
	// alone, isolated). Steps and Graphs count the steps run since load
	// and the graphs they ran in: Steps/Graphs is the mean batch.
	Batched bool  `json:"batched"`
	Steps   int64 `json:"steps"`
	Graphs  int64 `json:"graphs"`
	// Backend is where its layers run: "CPU", or a GPU backend with its
	// share of them ("Vulkan 8/8+head"); GPUWeightsBytes and
	// GPUKVPerSessionBytes what it holds there (WeightsBytes and the KV
	// figures above are the host's).
	Backend              string `json:"backend"`
	GPUWeightsBytes      int64  `json:"gpu_weights_bytes,omitempty"`
	GPUKVPerSessionBytes int64  `json:"gpu_kv_per_session_bytes,omitempty"`
}

// MemoryStatus is a peer's serving memory budget.
type MemoryStatus struct {
	MaxBytes  int64  `json:"max_bytes"` // 0: no budget
	UsedBytes int64  `json:"used_bytes"`
	Source    string `json:"source"` // where max_bytes comes from
}

// PowerStatus is a peer's power state (what its app reported, or what
// Linux says) and the policy's verdict (config key power).
type PowerStatus struct {
	Battery *Battery `json:"battery,omitempty"` // absent: no battery, or unknown
	Thermal string   `json:"thermal,omitempty"`
	// TakingWork is false while the peer refuses new requests from other
	// peers; Why says why (e.g. "battery at 10% and not charging
	// (power.min_battery 20)").
	TakingWork bool   `json:"taking_work"`
	Why        string `json:"why,omitempty"`
	// Reported is true when the embedding app reported the state
	// (mobile's ReportPower) rather than the system.
	Reported bool `json:"reported"`
}

// NATStatus is a peer's reachability and the addresses it announces.
type NATStatus struct {
	// Reachability is "public", "private" or "unknown" (AutoNAT has not
	// decided yet, or no peer could be asked).
	Reachability string `json:"reachability"`
	// Announced are the addresses in this peer's records: its own, mapped
	// ones, and /p2p-circuit addresses through relays it holds a slot on.
	Announced []string `json:"announced"`
	// Relayed is true when some announced address goes through a relay.
	Relayed bool `json:"relayed"`
	// RelayService is true while this peer serves as a relay for others.
	RelayService bool `json:"relay_service"`
	// RelayLimit is what one circuit through its relay may carry:
	// "control" or "member" (see nat.relay_limit); set while relaying.
	RelayLimit string `json:"relay_limit,omitempty"`
	// Counters of hole punching and relaying since start.
	Counters NATCounters `json:"counters"`
}

// NATCounters count hole punches this peer took part in and, while it
// relays, the circuits and bytes it relayed.
type NATCounters struct {
	PunchAttempts  int64 `json:"punch_attempts"`  // simultaneous-open tries
	PunchSuccesses int64 `json:"punch_successes"` // punches that ended direct
	PunchFailures  int64 `json:"punch_failures"`  // punches that gave up: the connection stays relayed
	// DirectDials: relayed connections upgraded by a plain direct dial,
	// no punch needed.
	DirectDials int64 `json:"direct_dials"`
	// PunchMSMedian and PunchMSLast: time from the start of a hole punch
	// to the direct connection (median of the last 64, and the last).
	PunchMSMedian float64 `json:"punch_ms_median,omitempty"`
	PunchMSLast   float64 `json:"punch_ms_last,omitempty"`
	// ToDirectMSMedian and ToDirectMSLast: time from the opening of the
	// relayed connection to a peer until the punch made it direct.
	ToDirectMSMedian float64 `json:"to_direct_ms_median,omitempty"`
	ToDirectMSLast   float64 `json:"to_direct_ms_last,omitempty"`
	// As a relay: circuits opened (and open now), circuit requests
	// refused, reservations granted (renewals not counted), and bytes
	// relayed (both directions).
	RelayCircuits     int64 `json:"relay_circuits"`
	RelayOpen         int64 `json:"relay_open"`
	RelayRefused      int64 `json:"relay_refused"`
	RelayReservations int64 `json:"relay_reservations"`
	RelayedBytes      int64 `json:"relayed_bytes"`
}

// Queue is the slot queue of a peer's models, summed.
type Queue struct {
	Waiting    int     `json:"waiting"`
	Limit      int     `json:"limit"`
	Waited     int64   `json:"waited"` // requests that had to wait, since start
	MeanWaitMS float64 `json:"mean_wait_ms"`
	MaxWaitMS  float64 `json:"max_wait_ms"`
}

// Error is the body of every API error.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is OpenAI-shaped so OpenAI clients show the message.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	// Status is set on an error event of a stream: the HTTP status the
	// error would have had, had it come before the stream began.
	Status int `json:"status,omitempty"`
}

// ModelInfo is one model of the OpenAI API's GET /v1/models: the swarm's
// modes (swarm, swarm-moa, swarm-speed), every role a live peer serves,
// the model names those roles run, and every pipeline model.
type ModelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}
