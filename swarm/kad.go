package swarm

import (
	"context"
	"fmt"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DHTPrefix is the protocol prefix of the swarm's Kademlia DHT: its own
// DHT, never the public IPFS one, so provider records of members and
// models are kept and answered only by peers of the swarm.
const DHTPrefix = "/swarm"

// NewDHT builds the Kademlia DHT a peer of the swarm runs on h, in mode,
// seeded with boot. node and the simulation (swarm/swarmsim) both build
// it here, so what is simulated is what runs.
func NewDHT(ctx context.Context, h host.Host, mode dht.ModeOpt, boot []peer.AddrInfo) (*dht.IpfsDHT, error) {
	d, err := dht.New(ctx, h, dht.ProtocolPrefix(DHTPrefix), dht.Mode(mode), dht.BootstrapPeers(boot...))
	if err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}
	return d, nil
}
