package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/swarm"
)

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
	return swarm.NewDHT(ctx, h, mode, boot)
}

// discovery finds peers on the LAN (mDNS) and keeps the bootstrap peers
// connected while this peer is isolated.
type discovery struct {
	h        host.Host
	isolated func() bool // the peer table holds few live neighbours (swarm.View.Isolated)
	log      *slog.Logger
	health   *health
	private  bool // a swarm key is in use: a failed handshake likely means a key mismatch
	mdns     interface{ Close() error }
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// startDiscovery starts mDNS (unless cfg.NoMDNS) and the bootstrap loop.
// A host where mDNS cannot start (no multicast interface: a container, a
// phone on mobile data) goes on without it, with a warning; d.mdns is then
// nil.
func startDiscovery(ctx context.Context, h host.Host, cfg Config, psk pnet.PSK, log *slog.Logger, hl *health, isolated func() bool) (*discovery, error) {
	ctx, cancel := context.WithCancel(ctx)
	d := &discovery{h: h, isolated: isolated, log: log, health: hl, private: psk != nil, cancel: cancel}
	if !cfg.NoMDNS {
		// Under a name of its swarm's own: peers of other swarms never
		// hear of this one, nor it of them.
		svc := mdns.NewMdnsService(h, mdnsService(psk), d)
		if err := svc.Start(); err != nil {
			svc.Close()
			msg := fmt.Sprintf("mDNS is off: %v (no LAN discovery; peers are found through bootstrap peers and the DHT)", err)
			hl.set("mdns", msg)
			log.Warn(msg)
		} else {
			d.mdns = svc
		}
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

// keepBootstrapped connects to the bootstrap peers and, while this peer
// is isolated (its table holds fewer live neighbours than half its
// bound: a newcomer, a peer cut off from most of the swarm), reconnects
// to any that drops, backing off up to 30 s while they are unreachable.
// Past that a bootstrap peer is a neighbour like any other: redialled by
// the whole swarm, it would hold every peer's connection
// (swarm/bootstrap.go).
func (d *discovery) keepBootstrapped(ctx context.Context, boot []peer.AddrInfo) {
	defer d.wg.Done()
	backoff := 250 * time.Millisecond
	for {
		missing := 0
		for _, ai := range boot {
			if ai.ID == d.h.ID() || d.h.Network().Connectedness(ai.ID) == network.Connected {
				continue
			}
			if !d.isolated() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if !viaRelay(ai) {
				// Past libp2p's dial backoff, so every attempt reports the
				// real cause (the DHT dials the same peer at start).
				cctx = network.WithForceDirectDial(cctx, "bootstrap")
			}
			err := d.h.Connect(cctx, ai)
			cancel()
			if err != nil {
				missing++
				if ctx.Err() == nil {
					d.bootstrapFailed(ai, err)
				}
				continue
			}
			if d.health.clear(bootstrapKey(ai.ID)) {
				d.log.Info("bootstrap peer reachable again", "peer", ai.ID)
			} else {
				d.log.Info("connected to bootstrap peer", "peer", ai.ID)
			}
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

func bootstrapKey(id peer.ID) string { return "bootstrap " + id.String() }

// bootstrapFailed warns about a bootstrap peer that cannot be reached: once
// per peer and cause, not on every retry (debug logs every attempt), and
// in the status warnings until it connects.
func (d *discovery) bootstrapFailed(ai peer.AddrInfo, err error) {
	if s := err.Error(); strings.Contains(s, "dial backoff") && strings.Count(s, "\n  * ") <= 1 {
		d.log.Debug("bootstrap peer in dial backoff", "peer", ai.ID)
		return // says nothing about the cause
	}
	msg := fmt.Sprintf("bootstrap peer %s %s", ai.ID, bootstrapProblem(err, d.private))
	if d.health.set(bootstrapKey(ai.ID), msg) {
		d.log.Warn(msg, "peer", ai.ID, "addrs", ai.Addrs, "err", err)
		return
	}
	d.log.Debug("bootstrap peer still not reachable", "peer", ai.ID, "err", err)
}

// bootstrapProblem says in words why a dial failed: the address names
// another peer, the handshake failed (a swarm key on one side only, or two
// different keys), or nothing answers.
func bootstrapProblem(err error, private bool) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "peer id mismatch"):
		return "answers with another peer ID: the /p2p/ part of its address is wrong"
	case handshakeFailed(s) && private:
		return "refused the handshake: it has a different swarm key, or none (a private swarm admits only peers with its key: join it with a token from swarmctl invite on one of its members)"
	case handshakeFailed(s):
		return "refused the handshake: it is probably a private swarm (swarm.key) this peer has no key for (join it with a token from swarmctl invite on one of its members)"
	}
	return "is unreachable: " + lastCause(s)
}

func handshakeFailed(s string) bool {
	for _, m := range []string{"failed to negotiate", "pnet", "handshake", "connection reset", "EOF", "message authentication failed"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// lastCause keeps the end of a long libp2p dial error, which names the
// cause ("connection refused", "i/o timeout").
func lastCause(s string) string {
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i > 8 {
		return s[i+2:]
	}
	return s
}

// viaRelay reports whether any of ai's addresses goes through a relay,
// which a forced direct dial would drop.
func viaRelay(ai peer.AddrInfo) bool {
	for _, a := range ai.Addrs {
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
			return true
		}
	}
	return false
}
