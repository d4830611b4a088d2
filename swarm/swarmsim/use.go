package swarmsim

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/pipeline"
)

// holdStage is a simulated peer's side of a stage stream: no inference
// runs in the simulation, so it holds the stream open until the route
// user closes it. While it is open both ends have a stream of
// pipeline.ProtocolID with each other, as node's do during a request, so
// swarm.InferenceStreamOpen (node's in-use test) holds each the other in
// use.
func holdStage(s network.Stream) {
	_, _ = io.Copy(io.Discard, s)
	_ = s.Close()
}

// Use marks the peers of route in use the way a pipeline request does in
// node: it opens a stage stream (pipeline.ProtocolID) to every hop but p
// itself and keeps them open until release is called. The control plane
// learns of it only through its WithInUse option (swarm.InferenceStreamOpen).
func (p *Peer) Use(ctx context.Context, route pipeline.Route) (release func(), err error) {
	var streams []network.Stream
	release = func() {
		for _, s := range streams {
			_ = s.Close()
		}
	}
	for _, hop := range route.Hops {
		id, err := peer.Decode(hop.Peer)
		if err != nil {
			release()
			return nil, fmt.Errorf("swarmsim: route hop %q: %w", hop.Peer, err)
		}
		if id == p.ID() {
			continue
		}
		s, err := p.Host.NewStream(ctx, id, pipeline.ProtocolID)
		if err != nil {
			release()
			return nil, fmt.Errorf("swarmsim: stage stream to %s: %w", id, err)
		}
		streams = append(streams, s)
	}
	if len(streams) == 0 {
		return nil, errors.New("swarmsim: the route has no peer but this one")
	}
	return release, nil
}
