package swarmsim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// protoCounter is a peer's libp2p bandwidth reporter: the stream bytes it
// sent per protocol (payload only; the datagram counts of Traffic carry
// QUIC's framing and encryption too). It is the harness's own: go-libp2p's
// BandwidthCounter meters on a sweeper goroutine of its own clock, which
// would outlive a synctest bubble.
type protoCounter struct {
	mu   sync.Mutex
	sent map[protocol.ID]int64
}

var _ metrics.Reporter = (*protoCounter)(nil)

func newProtoCounter() *protoCounter { return &protoCounter{sent: map[protocol.ID]int64{}} }

func (c *protoCounter) LogSentMessageStream(n int64, p protocol.ID, _ peer.ID) {
	if p == "" {
		p = "(negotiating)"
	}
	c.mu.Lock()
	c.sent[p] += n
	c.mu.Unlock()
}

func (c *protoCounter) snapshot() map[protocol.ID]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.sent)
}

func (c *protoCounter) LogSentMessage(int64)                             {}
func (c *protoCounter) LogRecvMessage(int64)                             {}
func (c *protoCounter) LogRecvMessageStream(int64, protocol.ID, peer.ID) {}
func (c *protoCounter) GetBandwidthForPeer(peer.ID) metrics.Stats        { return metrics.Stats{} }
func (c *protoCounter) GetBandwidthForProtocol(protocol.ID) metrics.Stats {
	return metrics.Stats{}
}
func (c *protoCounter) GetBandwidthTotals() metrics.Stats                     { return metrics.Stats{} }
func (c *protoCounter) GetBandwidthByPeer() map[peer.ID]metrics.Stats         { return nil }
func (c *protoCounter) GetBandwidthByProtocol() map[protocol.ID]metrics.Stats { return nil }
func (c *protoCounter) Reset()                                                {}
func (c *protoCounter) TrimIdle(time.Time)                                    {}

// ProtocolRates is the stream bytes per second sent per peer, by protocol.
type ProtocolRates map[protocol.ID]float64

// String names the protocols that sent the most, at most five.
func (r ProtocolRates) String() string {
	ps := slices.SortedFunc(maps.Keys(r), func(a, b protocol.ID) int {
		switch {
		case r[a] > r[b]:
			return -1
		case r[a] < r[b]:
			return 1
		}
		return strings.Compare(string(a), string(b))
	})
	var b strings.Builder
	for i, p := range ps {
		if i == 5 || r[p] < 1 {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f B/s", p, r[p])
	}
	if b.Len() == 0 {
		return "no stream bytes"
	}
	return b.String()
}
