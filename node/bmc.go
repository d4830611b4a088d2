package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/bmcauth"
)

// bmcDefaultKeyFile is the board key's file in the data dir.
const bmcDefaultKeyFile = "bmc.key"

// startBMC starts the BMC plane when bmc_peers or bmc_serial is set: the
// receiver of BMC tables and, with bmc_serial, the bridge of the board. It
// fails only on configuration errors (an unreadable key file): a board that
// is not plugged in is waited for.
func (n *Node) startBMC(ctx context.Context) error {
	if len(n.cfg.BMCPeers) == 0 && n.cfg.BMCSerial == "" {
		return nil
	}
	cfg := bmcauth.Config{Self: n.host.ID(), Serial: n.cfg.BMCSerial, ResetOnConnect: n.cfg.BMCDTR,
		Heartbeat: time.Duration(n.cfg.Heartbeat)}
	for _, p := range n.cfg.BMCPeers {
		id, err := peer.Decode(p)
		if err != nil {
			return fmt.Errorf("config: bmc_peers: %q: %w", p, err)
		}
		cfg.Allowed = append(cfg.Allowed, id)
	}
	if n.cfg.BMCSerial != "" {
		key, err := loadBMCKey(n.cfg.BMCKey, n.cfg.DataDir)
		if err != nil {
			return err
		}
		cfg.Key = key
	}
	var s *bmcauth.Service
	cfg.OnTable = func() { n.publishBMC(s) }
	s = bmcauth.New(n.router, n.swarm.View(), cfg, n.log.With("component", "bmc"))
	if err := s.Start(ctx); err != nil {
		return err
	}
	dead := s.Dead
	n.bmcDead.Store(&dead)
	n.bmc = s
	return nil
}

// stopBMC stops the BMC plane and clears the routing hook.
func (n *Node) stopBMC() {
	n.bmcDead.Store(nil)
	if s := n.bmc; s != nil {
		s.Close()
		n.bmc = nil
	}
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
