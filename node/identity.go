package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// IdentityFile is the name of the identity key file in the data dir.
const IdentityFile = "identity.key"

// prepareDataDir creates the data dir (0700) if needed and checks it is a
// writable directory.
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("data dir %s: not a directory", dir)
	}
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("data dir %s is not writable: %w", dir, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// loadOrCreateIdentity reads the Ed25519 key in dir, creating it (mode 0600)
// on first start. A key file that exists but does not decode is an error
// naming the file: it is never overwritten, since that would change the
// peer's identity.
func loadOrCreateIdentity(dir string) (crypto.PrivKey, error) {
	p := filepath.Join(dir, IdentityFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		k, err := crypto.UnmarshalPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("identity key %s is corrupt (%v); move it away to create a new identity", p, err)
		}
		return k, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("identity key %s: %w", p, err)
	}
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, fmt.Errorf("generating identity: %w", err)
	}
	b, err = crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding identity: %w", err)
	}
	// Write to a temp file and link it into place: two daemons starting on one
	// data dir at once must not end up with different identities.
	tmp, err := os.CreateTemp(dir, ".identity-*")
	if err != nil {
		return nil, fmt.Errorf("identity key %s: %w", p, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("identity key %s: %w", p, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("identity key %s: %w", p, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("identity key %s: %w", p, err)
	}
	if err := os.Link(tmp.Name(), p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return loadOrCreateIdentity(dir)
		}
		return nil, fmt.Errorf("identity key %s: %w", p, err)
	}
	return k, nil
}

// loadSwarmKey reads a pre-shared key in the IPFS swarm.key format.
func loadSwarmKey(path string) (pnet.PSK, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("swarm key: %w", err)
	}
	defer f.Close()
	psk, err := pnet.DecodeV1PSK(f)
	if err != nil {
		return nil, fmt.Errorf("swarm key %s: %w (want /key/swarm/psk/1.0.0/, /base16/ and 64 hex digits)", path, err)
	}
	return psk, nil
}

// keyModeWarning says, naming the file and its mode, when a key file can
// be read or written by users other than its owner; "" when it is private.
func keyModeWarning(path string) string {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o077 == 0 {
		return ""
	}
	return fmt.Sprintf("identity key %s has mode %04o: other users can read or change this peer's identity; run chmod 600 %s",
		path, st.Mode().Perm(), path)
}
