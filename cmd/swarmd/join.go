package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/node"
)

// joinBeforeStart applies --join: the token's key and addresses go into
// the data dir before the peer starts.
func joinBeforeStart(cfg node.Config, token string, log *slog.Logger) error {
	j, err := node.JoinDataDir(cfg, token)
	if err != nil {
		return fmt.Errorf("--join: %w", err)
	}
	if j.Previous != "" {
		log.Warn("joined a swarm: the data dir's swarm key was replaced by the token's (the old one is kept as swarm.key.old)",
			"swarm", j.SwarmID, "previous_swarm", j.Previous)
	} else {
		log.Info("joined a swarm", "swarm", j.SwarmID, "bootstrap", j.Bootstrap)
	}
	return nil
}

// restart replaces n by a new peer on the same config, re-read as at
// start, after a join changed the swarm key under it (swarmctl join): the
// libp2p host takes its key when it is made. The API and the libp2p
// listeners come back on the addresses they had (ephemeral ports
// included), so local tools and other peers find it where it was, and it
// serves the roles and shards it served (those added or removed at run
// time included), not the config's.
func (f *daemonFlags) restart(ctx context.Context, n *node.Node, log *slog.Logger) (*node.Node, error) {
	cfg, err := f.buildConfig()
	if err != nil {
		log.Error("restart: config not re-read; using the one at start", "err", err)
		cfg = n.Config
	}
	pinned := n.RestartConfig()
	cfg.API, cfg.Listen = pinned.API, pinned.Listen
	cfg.Roles, cfg.Shards = pinned.Roles, pinned.Shards
	log.Info("restarting the peer with its new swarm key")
	if err := n.Close(); err != nil {
		log.Warn("restart: closing the peer", "err", err)
	}
	next := &node.Node{Config: cfg, Logger: log}
	next.API = api.New(next, log)
	if err := next.Start(ctx); err != nil {
		next.Close()
		return nil, fmt.Errorf("restarting with the new swarm key: %w", err)
	}
	return next, nil
}
