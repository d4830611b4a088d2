package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// BMC timing. A table is in force for BMCFreshness after it was received:
// bridges publish every second, so a bridge that missed four publications
// in a row is silent and loses its authority to the next live BMC.
const (
	BMCFreshness      = 5 * time.Second
	bmcPublishEvery   = time.Second
	bmcForwardEvery   = 100 * time.Millisecond
	bmcOpenWarnEvery  = 30 * time.Second
	bmcMaxIgnored     = 16
	bmcPingEvery      = 30 // publications between two PING round-trip probes
	bmcDefaultKeyFile = "bmc.key"
)

// bmcService holds this peer's BMC parts: the receiver that keeps the last
// table of every allowed BMC and picks the authority, and, with bmc_serial,
// the bridge that drives the board.
//
// Authority rule: among the allowed BMC peers (bmc_peers, plus this peer
// when it is a bridge) whose last accepted table was received less than
// BMCFreshness ago, the one with the lowest peer ID (base58 text order) is
// the authority. When it goes silent for longer than BMCFreshness the next
// lowest live one takes over; when every BMC is silent no table is in force
// and the BMC declares nobody dead.
type bmcService struct {
	self    peer.ID
	router  *gossip.Router
	view    *swarm.View
	log     *slog.Logger
	allowed map[peer.ID]bool
	bridge  *bmcBridge // nil unless bmc_serial
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	onTable func() // a table was accepted (the "bmc" event)

	mu        sync.Mutex
	sources   map[peer.ID]*bmcSource // last accepted table per allowed BMC
	ignored   map[peer.ID]time.Time  // not-allowed publishers, last seen
	authority peer.ID                // as last logged
}

// bmcSource is the last accepted table of one BMC peer.
type bmcSource struct {
	rec   *gossip.BMCTable
	table *bmc.Table
	at    time.Time // received
	stale uint64    // older tables ignored since this BMC was first heard
}

// startBMC starts the BMC receiver when bmc_peers or bmc_serial is set, and
// the bridge with bmc_serial. It fails only on configuration errors (an
// unreadable key file): a board that is not plugged in is waited for.
func (n *Node) startBMC(ctx context.Context) error {
	if len(n.cfg.BMCPeers) == 0 && n.cfg.BMCSerial == "" {
		return nil
	}
	s := &bmcService{
		self: n.host.ID(), router: n.router, view: n.swarm.View(), log: n.log.With("component", "bmc"),
		allowed: map[peer.ID]bool{}, sources: map[peer.ID]*bmcSource{}, ignored: map[peer.ID]time.Time{},
	}
	for _, p := range n.cfg.BMCPeers {
		id, err := peer.Decode(p)
		if err != nil {
			return fmt.Errorf("config: bmc_peers: %q: %w", p, err)
		}
		s.allowed[id] = true
	}
	if n.cfg.BMCSerial != "" {
		key, err := loadBMCKey(n.cfg.BMCKey, n.cfg.DataDir)
		if err != nil {
			return err
		}
		s.allowed[s.self] = true // a bridge trusts the tables it verified itself
		s.bridge = newBMCBridge(s, n.cfg, key)
	}
	sub, err := s.router.SubscribeBMCTables()
	if err != nil {
		return err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(2)
	go s.receive(ctx, sub)
	go s.watch(ctx)
	if s.bridge != nil {
		s.wg.Add(1)
		go s.bridge.run(ctx)
	}
	s.onTable = func() { n.publishBMC(s) }
	dead := s.dead
	n.bmcDead.Store(&dead)
	n.bmc = s
	allowed := make([]string, 0, len(s.allowed))
	for id := range s.allowed {
		allowed = append(allowed, id.String())
	}
	sort.Strings(allowed)
	s.log.Info("bmc: accepting tables", "bmc_peers", strings.Join(allowed, ","), "fresh_for", BMCFreshness,
		"bridge", n.cfg.BMCSerial)
	return nil
}

// stopBMC stops the BMC parts and clears the routing hook.
func (n *Node) stopBMC() {
	n.bmcDead.Store(nil)
	if s := n.bmc; s != nil {
		s.cancel()
		s.wg.Wait()
		n.bmc = nil
	}
}

// receive feeds tables from gossip into the state.
func (s *bmcService) receive(ctx context.Context, sub *gossip.BMCSubscription) {
	defer s.wg.Done()
	defer sub.Cancel()
	for {
		rec, err := sub.Next(ctx)
		if err != nil {
			return
		}
		if s.accept(rec, time.Now()) && s.onTable != nil {
			s.onTable()
		}
	}
}

// watch logs, once a second, the authority changes that silence causes.
func (s *bmcService) watch(ctx context.Context) {
	defer s.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			s.mu.Lock()
			s.noteAuthorityLocked(now, nil)
			s.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}

// accept keeps rec if it comes from an allowed BMC and is newer (boot id,
// seq, uptime) than the last table accepted from that BMC.
func (s *bmcService) accept(rec *gossip.BMCTable, now time.Time) bool {
	from, err := peer.Decode(rec.PeerID)
	tab := rec.Table()
	if err != nil || tab == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.allowed[from] {
		if _, seen := s.ignored[from]; !seen {
			s.log.Warn("bmc: ignoring tables of a peer not in bmc_peers", "peer", from)
			if len(s.ignored) >= bmcMaxIgnored {
				s.evictIgnoredLocked()
			}
		}
		s.ignored[from] = now
		return false
	}
	prev := s.sources[from]
	if prev != nil && !tab.Newer(prev.table) {
		prev.stale++
		s.log.Debug("bmc: stale or replayed table ignored", "peer", from, "boot", tab.Boot, "seq", tab.Seq,
			"last_boot", prev.table.Boot, "last_seq", prev.table.Seq)
		return false
	}
	var stale uint64
	if prev != nil {
		stale = prev.stale
	}
	_, prevAuth := s.authorityLocked(now)
	s.sources[from] = &bmcSource{rec: rec, table: tab, at: now, stale: stale}
	s.noteAuthorityLocked(now, prevAuth)
	return true
}

func (s *bmcService) evictIgnoredLocked() {
	var victim peer.ID
	var oldest time.Time
	for id, at := range s.ignored {
		if victim == "" || at.Before(oldest) {
			victim, oldest = id, at
		}
	}
	delete(s.ignored, victim)
}

// authorityLocked applies the authority rule at now.
func (s *bmcService) authorityLocked(now time.Time) (peer.ID, *bmcSource) {
	var best peer.ID
	var src *bmcSource
	for id, sc := range s.sources {
		if now.Sub(sc.at) > BMCFreshness {
			continue
		}
		if best == "" || id.String() < best.String() {
			best, src = id, sc
		}
	}
	return best, src
}

// noteAuthorityLocked logs authority changes and, for the same authority,
// the peers its new table declares dead (prev is the authority's table
// before the update, or nil).
func (s *bmcService) noteAuthorityLocked(now time.Time, prev *bmcSource) {
	id, cur := s.authorityLocked(now)
	if id != s.authority {
		switch {
		case id == "":
			s.log.Warn("bmc: no table in force: every BMC silent", "last", s.authority, "silent_for", BMCFreshness)
		case s.authority == "":
			s.log.Info("bmc: authority", "peer", id, "boot", cur.table.Boot, "seq", cur.table.Seq)
		default:
			s.log.Warn("bmc: authority changed", "peer", id, "previous", s.authority)
		}
		s.authority = id
	}
	if cur == nil || prev == nil || prev == cur {
		return
	}
	for _, nd := range cur.table.Nodes {
		if !nd.Live && !prev.table.Dead(nd.Handle) {
			s.log.Info("bmc: board declares node dead", "node", nd.Handle, "peer", cur.rec.Nodes[nd.Handle.String()],
				"silent_for", nd.Age.Round(time.Millisecond), "bmc", id)
		}
	}
}

// dead is the routing hook: whether the authoritative table declares id dead.
func (s *bmcService) dead(id peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, src := s.authorityLocked(time.Now())
	return src != nil && src.table.Dead(bmc.HandleFor([]byte(id)))
}

// loadBMCKey reads the board's HMAC key: 64 hex characters (surrounding
// white space ignored) or 32 raw bytes. With no path it uses DATA_DIR/bmc.key
// and creates it with a random key if it does not exist.
func loadBMCKey(path, dataDir string) ([]byte, error) {
	if path == "" {
		path = filepath.Join(dataDir, bmcDefaultKeyFile)
		if !fileExists(path) {
			key := make([]byte, bmc.KeySize)
			if _, err := rand.Read(key); err != nil {
				return nil, fmt.Errorf("bmc key: %w", err)
			}
			if err := os.WriteFile(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
				return nil, fmt.Errorf("bmc key: creating %s: %w", path, err)
			}
			return key, nil
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: bmc_key: %w", err)
	}
	if len(b) == bmc.KeySize {
		return b, nil
	}
	if key, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil && len(key) == bmc.KeySize {
		return key, nil
	}
	return nil, fmt.Errorf("config: bmc_key %s: want %d raw bytes or %d hex characters", path, bmc.KeySize, 2*bmc.KeySize)
}

// modelHandle names a model on the board: the handle of its binary CID, or
// of the string when it is not a CID.
func modelHandle(model string) bmc.Handle {
	if c, err := cid.Decode(model); err == nil {
		return bmc.HandleFor(c.Bytes())
	}
	return bmc.HandleFor([]byte(model))
}
