package node

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/nat"
)

// The methods below are what the local API serves, as Go values, for
// programs that embed a peer (the gomobile facade in mobile/): one
// implementation behind both.

// ErrNotRunning is returned by the methods below before Start or after
// Close: an answer.Unavailable failure.
var ErrNotRunning error = &answer.Error{Kind: answer.Unavailable, Err: errors.New("peer is not running")}

// ID describes this peer (GET /v1/swarm/id).
func (n *Node) ID() (client.ID, error) {
	h := n.Host()
	if h == nil {
		return client.ID{}, ErrNotRunning
	}
	self := n.selfCapability()
	return client.ID{PeerID: h.ID().String(), Addrs: addrStrings(h), Version: Version,
		Platform: platformOut(self.Platform), Private: n.private, SwarmID: SwarmID(n.psk)}, nil
}

// Peers lists the peers this one knows, itself included (GET
// /v1/swarm/peers).
func (n *Node) Peers() (client.Peers, error) {
	s, h := n.Swarm(), n.Host()
	if s == nil || h == nil {
		return client.Peers{}, ErrNotRunning
	}
	now := time.Now()
	out := client.Peers{Peers: []client.Peer{}}
	for _, p := range s.View().Peers() {
		po := peerOut(p, now, p.Self || h.Network().Connectedness(p.ID) == network.Connected)
		for _, c := range h.Network().ConnsToPeer(p.ID) {
			po.Conns = append(po.Conns, client.Conn{Addr: c.RemoteMultiaddr().String(), Kind: n.nat.Kind(c),
				Direction: strings.ToLower(c.Stat().Direction.String())})
		}
		if !p.Self {
			if rtt := h.Peerstore().LatencyEWMA(p.ID); rtt > 0 {
				po.RTTMS = ms(rtt)
			}
			po.Relay = nat.OffersRelay(h, p.ID)
		} else {
			po.Relay = n.nat.Relaying()
		}
		out.Peers = append(out.Peers, po)
	}
	return out, nil
}

// Status reports this peer's state (GET /v1/swarm/status).
func (n *Node) Status() (client.Status, error) {
	s, h := n.Swarm(), n.Host()
	if s == nil || h == nil {
		return client.Status{}, ErrNotRunning
	}
	st := client.Status{
		PeerID: h.ID().String(), Version: Version, UptimeS: time.Since(n.start).Seconds(),
		Connections: len(h.Network().Conns()), DHTMode: n.cfg.DHTMode, MDNS: !n.cfg.NoMDNS,
		Private: n.private, SwarmID: SwarmID(n.psk), HeartbeatMS: time.Duration(n.cfg.Heartbeat).Milliseconds(),
		DeadAfterMS: s.View().Liveness().DeadAfter().Milliseconds(), Bootstrap: len(n.cfg.Bootstrap),
		ListenAddrs: addrStrings(h), Warnings: n.Warnings(), Queue: queueOut(n.queue()),
		NAT: n.nat.Status(), Power: n.powerStatus(), Memory: n.mem.status(), Tasks: n.tasks.list(),
		Ledger: n.ledgerSummary(), GPU: n.gpuStatus(),
	}
	for _, p := range s.View().Peers() {
		st.PeersKnown++
		if p.Alive {
			st.PeersAlive++
		}
	}
	n.mu.Lock()
	if n.dht != nil {
		st.DHTPeers = n.dht.RoutingTable().Size()
	}
	n.mu.Unlock()
	return st, nil
}

// Answer is a query's answer.
type Answer struct {
	// Result is the body POST /v1/swarm/query answers with.
	Result *answer.Result
	// Text is the final answer, cut before the first stop string.
	Text string
	// Reasoning is the final answer's reasoning, apart from Text (GPT-OSS's
	// analysis channel; Result.Reasoning); stop strings do not cut it.
	Reasoning string
	// PromptTokens and CompletionTokens are the final answer's model's
	// counts.
	PromptTokens, CompletionTokens int
	// Finish is why the answer ended, as OpenAI says it: "stop" or
	// "length".
	Finish string
}

// Query answers req as POST /v1/swarm/query does. on, when not nil, sees
// what a streaming call sends as it happens, by event name: "agent" (a
// answer.Agent), "agent_token" (client.AgentToken), "token" (the text, a
// string), "reasoning" (the final answer's reasoning as it is written, a
// string: its writer's, pipeline or MoA) and "trace"
// (answer.Trace, a pipeline's progress). Cancelling ctx
// stops the generation. An error says its kind (answer.KindOf).
func (n *Node) Query(ctx context.Context, req client.QueryRequest, on func(event string, v any)) (*Answer, error) {
	if n.Swarm() == nil {
		return nil, ErrNotRunning
	}
	spec, err := specFromQuery(req)
	if err != nil {
		return nil, err
	}
	if err := n.waitStartLoads(ctx); err != nil {
		return nil, err
	}
	if on != nil {
		spec.onAgent = func(a answer.Agent) { on("agent", a) }
		spec.onToken = func(t string) { on("token", t) }
		spec.onReasoning = func(t string) { on("reasoning", t) }
		spec.onAgentToken = func(role, peer, text string) {
			on("agent_token", client.AgentToken{Role: role, Peer: peer, Text: text})
		}
		spec.onTrace = on
	}
	out, err := n.ask(ctx, spec)
	if err != nil {
		return nil, err
	}
	var reasoning string
	if out.result != nil {
		reasoning = out.result.Reasoning
	}
	return &Answer{Result: out.result, Text: out.final, Reasoning: reasoning, PromptTokens: out.promptToks,
		CompletionTokens: out.genToks, Finish: out.finish}, nil
}

// APIToken is the bearer token the local API requires (config api_token;
// "" for none).
func (n *Node) APIToken() string { return n.cfg.APIToken }

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
