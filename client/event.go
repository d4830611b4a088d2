package client

import "encoding/json"

// SwarmEvent is one event of GET /v1/swarm/events, the peer's live feed:
// an SSE event named Type whose data is this object.
//
// Types: "snapshot" (Data: EventsSnapshot) first, on every connection;
// "task" (Data: Task) while a pull, fetch, load, synth or slice
// runs; "peers" (Data: Peers) when the view of the swarm changes; "roles"
// and "shards" when this peer's served models change (Data: PS); "bmc"
// (Data: BMC) when a BMC table arrives; "dropped" (Data: a count) when the
// reader fell behind and lost that many events.
type SwarmEvent struct {
	Type   string          `json:"type"`
	TimeMS int64           `json:"time_ms"`
	Data   json.RawMessage `json:"data"`
}

// EventsSnapshot is the first event of GET /v1/swarm/events ("snapshot"):
// the state the later events update. BMC is null on a peer with no BMC
// configured.
type EventsSnapshot struct {
	ID     ID     `json:"id"`
	Status Status `json:"status"`
	Peers  Peers  `json:"peers"`
	PS     PS     `json:"ps"`
	BMC    *BMC   `json:"bmc"`
}
