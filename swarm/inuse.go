package swarm

import (
	"strings"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// inferencePrefixes are the protocols of inference streams (moa's and
// pipeline's stage protocol, any version): swarm cannot import them, so
// their prefixes are named here, and the simulation's route user checks
// pipeline.ProtocolID against them by using it.
var inferencePrefixes = []string{"/swarm/moa/", "/swarm/stage/"}

// InferenceStreamOpen reports whether h has an inference stream open with
// id (an MoA request or a pipeline stage, either way): a peer doing work
// for or with this one now. It is what node passes to WithInUse (such a
// peer is probed every Heartbeat) and to WithProtect, and what the
// simulation passes too.
func InferenceStreamOpen(h host.Host, id peer.ID) bool {
	for _, c := range h.Network().ConnsToPeer(id) {
		for _, s := range c.GetStreams() {
			p := string(s.Protocol())
			for _, pre := range inferencePrefixes {
				if strings.HasPrefix(p, pre) {
					return true
				}
			}
		}
	}
	return false
}
