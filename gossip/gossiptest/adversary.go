// Package gossiptest is an adversary for tests: a libp2p peer that speaks
// gossipsub's wire format itself, with go-libp2p-pubsub's own protobuf
// types, so that it can do what a well-behaved router never does: refuse
// the other side's gossip stream, replay other peers' signed messages
// verbatim to a peer that never saw them, and sign messages as many
// identities.
package gossiptest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"context"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"
)

// Protocols are the gossipsub protocol IDs the adversary speaks.
var Protocols = []protocol.ID{pubsub.GossipSubID_v13, pubsub.GossipSubID_v12, pubsub.GossipSubID_v11}

// Raw is a gossip peer with no router: it writes RPCs itself.
type Raw struct {
	h host.Host

	mu      sync.Mutex
	streams map[peer.ID]network.Stream
}

// NewRaw wraps h. With accept, h takes the other side's gossip streams
// and reads them to the end (never answering); without, it has no handler
// for them, so every peer's attempt to open one fails: it refuses them.
func NewRaw(h host.Host, accept bool) *Raw {
	if accept {
		for _, p := range Protocols {
			h.SetStreamHandler(p, func(s network.Stream) {
				io.Copy(io.Discard, s)
				s.Reset()
			})
		}
	}
	return &Raw{h: h, streams: map[peer.ID]network.Stream{}}
}

// Host is the adversary's host.
func (r *Raw) Host() host.Host { return r.h }

// Open opens a gossip stream to p (connected already, or dialable from
// the peerstore) and says it subscribes to topics.
func (r *Raw) Open(ctx context.Context, p peer.ID, topics ...string) error {
	s, err := r.h.NewStream(ctx, p, Protocols...)
	if err != nil {
		return fmt.Errorf("gossiptest: opening gossip stream: %w", err)
	}
	r.mu.Lock()
	r.streams[p] = s
	r.mu.Unlock()
	rpc := &pb.RPC{}
	for _, t := range topics {
		rpc.Subscriptions = append(rpc.Subscriptions, &pb.RPC_SubOpts{Subscribe: proto.Bool(true), Topicid: proto.String(t)})
	}
	return r.write(p, rpc)
}

// Send writes msgs to p in one RPC, on the stream Open made.
func (r *Raw) Send(p peer.ID, msgs ...*pb.Message) error {
	return r.write(p, &pb.RPC{Publish: msgs})
}

// Graft asks p to take the adversary into its mesh for topics.
func (r *Raw) Graft(p peer.ID, topics ...string) error {
	ctl := &pb.ControlMessage{}
	for _, t := range topics {
		ctl.Graft = append(ctl.Graft, &pb.ControlGraft{TopicID: proto.String(t)})
	}
	return r.write(p, &pb.RPC{Control: ctl})
}

// ErrNoStream is a Send to a peer without an open stream.
var ErrNoStream = errors.New("gossiptest: no gossip stream to that peer")

func (r *Raw) write(p peer.ID, rpc *pb.RPC) error {
	r.mu.Lock()
	s := r.streams[p]
	r.mu.Unlock()
	if s == nil {
		return ErrNoStream
	}
	b, err := proto.Marshal(rpc)
	if err != nil {
		return err
	}
	out := binary.AppendUvarint(nil, uint64(len(b)))
	if _, err := s.Write(append(out, b...)); err != nil {
		return fmt.Errorf("gossiptest: writing rpc: %w", err)
	}
	return nil
}

// Close resets every stream it opened.
func (r *Raw) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, s := range r.streams {
		s.Reset()
		delete(r.streams, p)
	}
}

// Sign builds a gossip message on topic carrying data, authored and
// signed by key exactly as a gossipsub router would sign it (StrictSign).
func Sign(key crypto.PrivKey, topic string, data []byte, seqno uint64) (*pb.Message, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	m := &pb.Message{From: []byte(id), Data: data, Seqno: binary.BigEndian.AppendUint64(nil, seqno), Topic: proto.String(topic)}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	sig, err := key.Sign(append([]byte(pubsub.SignPrefix), b...))
	if err != nil {
		return nil, err
	}
	m.Signature = sig
	return m, nil
}
