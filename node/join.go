package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
)

// JoinedPeersFile, in the data dir, lists the peers join tokens named, one
// multiaddr (ending in /p2p/ID) a line: bootstrap peers at every start,
// besides the config's.
const JoinedPeersFile = "joined.peers"

// Invite is a join token for this peer's swarm (GET /v1/swarm/invite): the
// swarm key and this peer's dialable addresses. An open swarm has none:
// anyone may come in.
func (n *Node) Invite() (client.Invite, error) {
	n.mu.Lock()
	h, psk, open := n.host, n.psk, n.cfg.Open
	n.mu.Unlock()
	if h == nil {
		return client.Invite{}, ErrNotRunning
	}
	if psk == nil {
		why := "it has no key"
		if open {
			why = "it is open (open: true): any peer that finds it may come in"
		}
		return client.Invite{}, answer.Errorf(answer.BadRequest, "this peer's swarm has no invitations: %s", why)
	}
	inv := Invite{Key: psk, Peer: h.ID(), Addrs: dialable(h.Addrs())}
	if len(inv.Addrs) == 0 {
		return client.Invite{}, answer.Errorf(answer.Unavailable, "this peer has no address another peer could dial yet")
	}
	out := client.Invite{Token: inv.String(), SwarmID: SwarmID(psk), PeerID: h.ID().String()}
	for _, a := range inv.Addrs {
		out.Addrs = append(out.Addrs, a.String())
	}
	return out, nil
}

// dialable orders addrs for a join token: LAN and public addresses first,
// then relayed ones; loopback only when there is nothing else (peers on
// one machine); never link-local ones (they need a zone).
func dialable(addrs []ma.Multiaddr) []ma.Multiaddr {
	var direct, relayed, loop []ma.Multiaddr
	for _, a := range addrs {
		switch {
		case viaRelay(peer.AddrInfo{Addrs: []ma.Multiaddr{a}}):
			relayed = append(relayed, a)
		case manet.IsIPLoopback(a):
			loop = append(loop, a)
		case isLinkLocal(a):
		default:
			direct = append(direct, a)
		}
	}
	out := append(direct, relayed...)
	if len(out) == 0 {
		out = loop
	}
	if len(out) > maxInviteAddrs {
		out = out[:maxInviteAddrs]
	}
	return out
}

func isLinkLocal(a ma.Multiaddr) bool {
	ip, err := manet.ToIP(a)
	return err == nil && (ip.IsLinkLocalUnicast() || ip.Equal(net.IPv6unspecified) || ip.IsUnspecified())
}

// Join makes this peer a member of the swarm of token (POST
// /v1/swarm/join): the token's key goes into the data dir's swarm.key (a
// different key is kept as swarm.key.old) and its addresses into
// joined.peers. A new key takes a restart of the peer's network:
// RestartRequested is then closed, and the owner of the node (swarmd, the
// mobile facade) closes it and starts a new one on the same config.
func (n *Node) Join(ctx context.Context, token string) (client.Joined, error) {
	inv, err := ParseInvite(token)
	if err != nil {
		return client.Joined{}, answer.Wrap(answer.BadRequest, err)
	}
	n.mu.Lock()
	h, cfg := n.host, n.cfg
	n.mu.Unlock()
	if h == nil {
		return client.Joined{}, ErrNotRunning
	}
	if err := joinable(cfg); err != nil {
		return client.Joined{}, answer.Wrap(answer.BadRequest, err)
	}
	if inv.Peer == h.ID() {
		return client.Joined{}, answer.Errorf(answer.BadRequest, "the token is this peer's own invitation: use it on another peer")
	}
	j, changed, err := joinDataDir(cfg.DataDir, inv)
	if err != nil {
		return client.Joined{}, answer.Wrap(answer.Internal, err)
	}
	if !changed {
		// Same swarm: no restart, only the new addresses to dial now.
		n.log.Info("join: already a member of this swarm; dialing the inviting peer", "swarm", j.SwarmID, "peer", inv.Peer)
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			h.Connect(cctx, peer.AddrInfo{ID: inv.Peer, Addrs: inv.Addrs})
		}()
		return j, nil
	}
	n.log.Warn("join: swarm key replaced; the peer restarts its network with the new key",
		"swarm", j.SwarmID, "previous_swarm", j.Previous, "old_key", cfg.SwarmKey+".old", "peer", inv.Peer)
	j.Restarting = true
	n.requestRestart()
	return j, nil
}

// RestartRequested is closed once a Join has changed this peer's swarm
// key: the running host still has the old one, so the node's owner must
// Close it and Start a new node on the same config.
func (n *Node) RestartRequested() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.restart == nil {
		n.restart = make(chan struct{})
	}
	return n.restart
}

func (n *Node) requestRestart() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.restart == nil {
		n.restart = make(chan struct{})
	}
	select {
	case <-n.restart:
	default:
		close(n.restart)
	}
}

// RestartConfig is the node's Config with the API and the libp2p listen
// addresses pinned to those it has now (ephemeral ports included), and
// its roles and shards those it serves now (added at run time included,
// removed ones left out): the config of the node that replaces it after
// RestartRequested, so that local tools and other peers find the peer
// where it was, serving what it served.
func (n *Node) RestartConfig() Config {
	roles, shardSpecs := n.servedSpecs()
	n.mu.Lock()
	defer n.mu.Unlock()
	cfg := n.Config
	if roles != nil {
		cfg.Roles, cfg.Shards = roles, shardSpecs
	}
	if n.api != nil {
		cfg.API = n.api.addr()
	}
	if n.host != nil {
		cfg.Listen = nil
		for _, a := range n.host.Network().ListenAddresses() {
			cfg.Listen = append(cfg.Listen, a.String())
		}
	}
	return cfg
}

// servedSpecs is what the peer serves now, as the roles and shards config
// keys spell it: each role's model file, and each shard as the file its
// layers were loaded from (a slice in the data dir, or the model) and its
// range, so that a restart needs no other peer to load them again. Nil
// roles: the peer is not running.
func (n *Node) servedSpecs() (map[string]string, []string) {
	if n.Swarm() == nil || n.moaServer == nil || n.pipe == nil {
		return nil, nil
	}
	n.runMu.Lock() // an AddRole or AddShard under way finishes first
	defer n.runMu.Unlock()
	roles := map[string]string{}
	for _, rm := range n.moaServer.Models() {
		roles[rm.Role] = rm.Model.Info().Path
	}
	var specs []string
	for _, sh := range n.pipe.stages.Local() {
		specs = append(specs, fmt.Sprintf("%s:%d-%d", sh.Model.Info().Path, sh.Start, sh.End))
	}
	return roles, specs
}

// JoinDataDir prepares the data dir of cfg to join the swarm of token
// before the peer starts (swarmd --join): the same files as Node.Join
// writes, refused the same way (an open swarm, a swarm_key file), and
// with ErrDataDirInUse, writing nothing, while a peer runs on the dir.
func JoinDataDir(cfg Config, token string) (client.Joined, error) {
	inv, err := ParseInvite(token)
	if err != nil {
		return client.Joined{}, err
	}
	if cfg, err = cfg.withDefaults(); err != nil {
		return client.Joined{}, err
	}
	if err := joinable(cfg); err != nil {
		return client.Joined{}, err
	}
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return client.Joined{}, err
	}
	// A peer running on the dir holds its lock: its key must not change
	// under it. Released on return, for the peer's Start to take.
	lk, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return client.Joined{}, err
	}
	defer lk.release()
	if b, err := os.ReadFile(filepath.Join(cfg.DataDir, IdentityFile)); err == nil {
		if k, err := crypto.UnmarshalPrivateKey(b); err == nil && peerIDOf(k) == inv.Peer {
			return client.Joined{}, errors.New("the token is this peer's own invitation: use it on another peer")
		}
	}
	j, _, err := joinDataDir(cfg.DataDir, inv)
	return j, err
}

// joinable says why a peer of cfg (defaults applied) cannot join by token.
func joinable(cfg Config) error {
	if cfg.Open {
		return errors.New("this peer runs an open swarm (open: true in its config, or swarmd --open): drop it to join a private swarm")
	}
	if want := filepath.Join(cfg.DataDir, SwarmKeyFile); cfg.SwarmKey != want {
		return fmt.Errorf("this peer's swarm key is the file %s (swarm_key, or swarmd --swarm-key); a join writes %s: drop that setting to join by token", cfg.SwarmKey, want)
	}
	return nil
}

// joinDataDir writes inv's key and addresses into dir; changed is false
// when the key was already there.
func joinDataDir(dir string, inv Invite) (j client.Joined, changed bool, err error) {
	keyPath := filepath.Join(dir, SwarmKeyFile)
	_, statErr := os.Stat(keyPath)
	old, err := installSwarmKey(keyPath, inv.Key)
	if err != nil {
		return j, false, err
	}
	changed = old != "" || errors.Is(statErr, fs.ErrNotExist)
	j = client.Joined{SwarmID: SwarmID(inv.Key), Previous: old, Bootstrap: inv.Bootstrap()}
	peers := j.Bootstrap
	if !changed {
		// The same swarm: keep the peers other tokens of it named.
		prev, _ := readJoinedPeers(dir)
		peers = append(prev, peers...)
	}
	if err := writeJoinedPeers(dir, peers); err != nil {
		return j, changed, err
	}
	return j, changed, nil
}

func writeJoinedPeers(dir string, peers []string) error {
	var b bytes.Buffer
	b.WriteString("# Peers named by join tokens (swarmd --join, swarmctl join): bootstrap peers at every start.\n")
	seen := map[string]bool{}
	for _, p := range peers {
		if !seen[p] {
			seen[p] = true
			b.WriteString(p + "\n")
		}
	}
	p := filepath.Join(dir, JoinedPeersFile)
	if err := writeFileReplace(p, b.Bytes()); err != nil {
		return fmt.Errorf("joined peers %s: %w", p, err)
	}
	return nil
}

// readJoinedPeers reads the data dir's joined.peers (none: nil); a line
// that is not a bootstrap address is an error naming the file and line.
func readJoinedPeers(dir string) ([]string, error) {
	p := filepath.Join(dir, JoinedPeersFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("joined peers %s: %w", p, err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if _, err := ParseBootstrap(s); err != nil {
			return nil, fmt.Errorf("joined peers %s line %d: %w (fix the line or remove it)", p, line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// withJoinedPeers adds the data dir's joined peers to cfg's bootstrap
// peers (a private swarm's only: an open one has no use for a key's peers).
func withJoinedPeers(cfg Config) (Config, error) {
	if cfg.Open {
		return cfg, nil
	}
	joined, err := readJoinedPeers(cfg.DataDir)
	if err != nil {
		return cfg, err
	}
	boot := slices.Clone(cfg.Bootstrap)
	for _, p := range joined {
		if !slices.Contains(boot, p) {
			boot = append(boot, p)
		}
	}
	cfg.Bootstrap = boot
	return cfg, nil
}

func peerIDOf(k crypto.PrivKey) peer.ID {
	id, _ := peer.IDFromPrivateKey(k)
	return id
}
