package moa

import (
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// AddLimits gives /swarm/moa/1.0.0 and /swarm/draft/1.0.0 their own
// resource-manager limits. For /swarm/moa/1.0.0: the
// memory its frames may take, for all peers together and for any one
// peer. Every frame is reserved from them before it is read (a frame of n
// bytes reserves 2n), so a crowd of identities sending large frames is
// refused with "busy" instead of growing the process. At a 256 MiB budget
// the protocol gets 32 MiB and one peer 4.5 MiB: two frames of the
// largest size at once, hundreds of ordinary requests.
func AddLimits(l *rcmgr.ScalingLimitConfig) {
	// /swarm/moa/1.1.0 (ReasoningProtocolID) is the same protocol with
	// reasoning in its token frames: the same limits.
	for _, id := range []protocol.ID{ProtocolID, ReasoningProtocolID} {
		l.AddProtocolLimit(id,
			rcmgr.BaseLimit{StreamsInbound: 256, StreamsOutbound: 256, Streams: 512, Memory: 16 << 20},
			rcmgr.BaseLimitIncrease{StreamsInbound: 256, StreamsOutbound: 256, Streams: 512, Memory: 64 << 20})
		l.AddProtocolPeerLimit(id,
			rcmgr.BaseLimit{StreamsInbound: 32, StreamsOutbound: 64, Streams: 96, Memory: 4 << 20},
			rcmgr.BaseLimitIncrease{Memory: 2 << 20})
	}
	// A draft session is one stream holding a drafter slot, its frames a
	// prompt at most and then a few dozen tokens: few streams, little
	// memory, for all peers and for one.
	l.AddProtocolLimit(DraftProtocolID,
		rcmgr.BaseLimit{StreamsInbound: 64, StreamsOutbound: 64, Streams: 128, Memory: 8 << 20},
		rcmgr.BaseLimitIncrease{Memory: 16 << 20})
	l.AddProtocolPeerLimit(DraftProtocolID,
		rcmgr.BaseLimit{StreamsInbound: 8, StreamsOutbound: 8, Streams: 16, Memory: 2 << 20},
		rcmgr.BaseLimitIncrease{Memory: 1 << 20})
}
