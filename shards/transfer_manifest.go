package shards

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// rawOf is the file CID of bytes hashing to root's digest: what the
// transfer protocol announces for a manifest.
func rawOf(root cid.Cid) string { return cid.NewCidV1(cid.Raw, root.Hash()).String() }

// FetchManifest returns the manifest of the model root, from st or else
// from p. The bytes must hash to root: any peer may serve it.
func FetchManifest(ctx context.Context, h host.Host, p peer.ID, st *Store, root string, opts ...FetchOption) (*Manifest, error) {
	cfg, err := newFetchConfig(opts, MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	return fetchManifest(ctx, h, p, st, root, cfg)
}

func fetchManifest(ctx context.Context, h host.Host, p peer.ID, st *Store, root string, base *fetchConfig) (*Manifest, error) {
	c, err := ParseModelCID(root)
	if err != nil {
		return nil, err
	}
	if !IsRoot(c) {
		return nil, fmt.Errorf("%w: %s is a file CID, not a model root", ErrBadManifest, root)
	}
	root = c.String()
	if m, _, ok := st.Manifest(root); ok {
		return m, nil
	}
	cfg := *base
	cfg.expect, cfg.maxSize, cfg.progress = rawOf(c), MaxManifestBytes, nil
	name := manifestName(root)
	unlock, err := st.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if m, _, ok := st.Manifest(root); ok {
		return m, nil
	}
	dst := filepath.Join(st.dir, ".fetch-"+name)
	defer discardPartial(dst)
	if _, err := download(ctx, h, p, st, transferRequest{Op: OpManifest, Model: root}, dst, &cfg); err != nil {
		return nil, fmt.Errorf("shards: fetching the manifest of %s from %s: %w", root, p, err)
	}
	b, err := os.ReadFile(dst + ".partial")
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	m, err := st.PutManifest(root, b)
	if err != nil {
		cfg.log.Warn("shards: refused a manifest that does not match its root", "peer", p, "model", root, "err", err)
		return nil, fmt.Errorf("shards: manifest from %s rejected: %w", p, err)
	}
	return m, nil
}

// manifestFor returns the manifest to check a file of modelCID against:
// nil for a model named by a file CID (checked by the older rules).
func manifestFor(ctx context.Context, h host.Host, p peer.ID, st *Store, modelCID string, cfg *fetchConfig) (*Manifest, error) {
	c, err := ParseModelCID(modelCID)
	if err != nil || !IsRoot(c) {
		return nil, err
	}
	return fetchManifest(ctx, h, p, st, modelCID, cfg)
}
