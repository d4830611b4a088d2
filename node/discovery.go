package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
)

// MDNSService is the mDNS service name peers of this swarm advertise.
const MDNSService = "_llmswarm._udp"

func newDHT(ctx context.Context, h host.Host, cfg Config) (*dht.IpfsDHT, error) {
	mode := map[string]dht.ModeOpt{"server": dht.ModeServer, "client": dht.ModeClient, "auto": dht.ModeAuto}[cfg.DHTMode]
	var boot []peer.AddrInfo
	for _, b := range cfg.Bootstrap {
		ai, err := ParseBootstrap(b)
		if err != nil {
			return nil, err
		}
		boot = append(boot, ai)
	}
	d, err := dht.New(ctx, h, dht.ProtocolPrefix("/swarm"), dht.Mode(mode), dht.BootstrapPeers(boot...))
	if err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}
	return d, nil
}

// discovery finds peers on the LAN (mDNS) and keeps the bootstrap peers
// connected.
type discovery struct {
	h      host.Host
	log    *slog.Logger
	mdns   interface{ Close() error }
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startDiscovery(ctx context.Context, h host.Host, cfg Config, log *slog.Logger) (*discovery, error) {
	ctx, cancel := context.WithCancel(ctx)
	d := &discovery{h: h, log: log, cancel: cancel}
	if !cfg.NoMDNS {
		svc := mdns.NewMdnsService(h, MDNSService, d)
		if err := svc.Start(); err != nil {
			cancel()
			return nil, fmt.Errorf("mdns: %w", err)
		}
		d.mdns = svc
	}
	var boot []peer.AddrInfo
	for _, b := range cfg.Bootstrap {
		ai, err := ParseBootstrap(b)
		if err != nil {
			d.close()
			return nil, err
		}
		boot = append(boot, ai)
	}
	if len(boot) > 0 {
		d.wg.Add(1)
		go d.keepBootstrapped(ctx, boot)
	}
	return d, nil
}

// HandlePeerFound implements mdns.Notifee: connect to the LAN peer.
func (d *discovery) HandlePeerFound(ai peer.AddrInfo) {
	if ai.ID == d.h.ID() || d.h.Network().Connectedness(ai.ID) == network.Connected {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.h.Connect(ctx, ai); err != nil {
		d.log.Debug("mdns peer not reachable", "peer", ai.ID, "err", err)
		return
	}
	d.log.Info("peer found on LAN", "peer", ai.ID)
}

// keepBootstrapped connects to the bootstrap peers and reconnects to any
// that drops, backing off up to 30 s while they are unreachable.
func (d *discovery) keepBootstrapped(ctx context.Context, boot []peer.AddrInfo) {
	defer d.wg.Done()
	backoff := 250 * time.Millisecond
	for {
		missing := 0
		for _, ai := range boot {
			if ai.ID == d.h.ID() || d.h.Network().Connectedness(ai.ID) == network.Connected {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := d.h.Connect(cctx, ai)
			cancel()
			if err != nil {
				missing++
				if ctx.Err() == nil {
					d.log.Debug("bootstrap peer not reachable", "peer", ai.ID, "err", err)
				}
				continue
			}
			d.log.Info("connected to bootstrap peer", "peer", ai.ID)
		}
		if missing == 0 {
			backoff = 2 * time.Second
		} else if backoff *= 2; backoff > 30*time.Second {
			backoff = 30 * time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

func (d *discovery) close() {
	d.cancel()
	if d.mdns != nil {
		d.mdns.Close()
	}
	d.wg.Wait()
}
