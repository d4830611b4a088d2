package node

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/pnet"
)

// SwarmKeyFile is the name of the swarm key in the data dir. A peer with
// no key and no open: true creates one on first start: a fresh peer is a
// swarm of its own, which others join by invitation (docs/joining.md).
const SwarmKeyFile = "swarm.key"

// OpenMDNSService is the mDNS service name of open swarms. A private
// swarm advertises under a name derived from its key (mdnsService), so
// mDNS finds members of the same swarm only.
const OpenMDNSService = "_llmswarm._udp"

// SwarmID is a short public name of a swarm key: 8 hex digits of a hash
// of it, which tells keys apart in logs and status and says nothing of the
// key itself. "" for an open swarm.
func SwarmID(psk pnet.PSK) string {
	if psk == nil {
		return ""
	}
	h := sha256.Sum256(append([]byte("llmswarm swarm id\x00"), psk...))
	return hex.EncodeToString(h[:4])
}

// mdnsService is the mDNS service name of the swarm of psk (nil: open).
// A DNS-SD service name is at most 15 characters: "swarm-" and the 8
// digits of the swarm ID make 14.
func mdnsService(psk pnet.PSK) string {
	if psk == nil {
		return OpenMDNSService
	}
	return "_swarm-" + SwarmID(psk) + "._udp"
}

// encodeSwarmKey writes psk in the IPFS swarm.key format.
func encodeSwarmKey(psk pnet.PSK) []byte {
	return []byte("/key/swarm/psk/1.0.0/\n/base16/\n" + hex.EncodeToString(psk) + "\n")
}

// newSwarmKey is 32 random bytes.
func newSwarmKey() (pnet.PSK, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generating swarm key: %w", err)
	}
	return k, nil
}

// loadOrCreateSwarmKey reads the key at path, creating it (mode 0600, a
// new random key) when it does not exist. Two peers starting on one data
// dir at once end up with the same key: the file is linked into place.
func loadOrCreateSwarmKey(path string) (psk pnet.PSK, created bool, err error) {
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		psk, err := loadSwarmKey(path)
		return psk, false, err
	}
	if psk, err = newSwarmKey(); err != nil {
		return nil, false, err
	}
	if err := writeFileNew(path, encodeSwarmKey(psk)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			psk, err := loadSwarmKey(path)
			return psk, false, err
		}
		return nil, false, fmt.Errorf("swarm key %s: %w", path, err)
	}
	return psk, true, nil
}

// writeFileNew writes b (mode 0600) to a temp file in path's dir and links
// it into place: fs.ErrExist when path exists.
func writeFileNew(path string, b []byte) error { return writePrivate(path, b, os.Link) }

// writeFileReplace writes b (mode 0600) to path through a temp file and a
// rename, so that a reader sees the old or the new content, never half.
func writeFileReplace(path string, b []byte) error { return writePrivate(path, b, os.Rename) }

// writePrivate writes b to a temp file (mode 0600) in path's dir and puts
// it at path with place (os.Link or os.Rename).
func writePrivate(path string, b []byte, place func(tmp, path string) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return place(tmp.Name(), path)
}

// installSwarmKey makes psk the key at path. A different key already
// there is kept as path.old; old is its swarm ID ("" when there was none
// or it was the same key).
func installSwarmKey(path string, psk pnet.PSK) (old string, err error) {
	if cur, err := os.ReadFile(path); err == nil {
		prev, derr := pnet.DecodeV1PSK(bytes.NewReader(cur))
		if derr == nil && bytes.Equal(prev, psk) {
			return "", nil
		}
		if derr == nil {
			old = SwarmID(prev)
		} else {
			old = "unreadable"
		}
		if err := writeFileReplace(path+".old", cur); err != nil {
			return "", fmt.Errorf("swarm key %s: keeping the old key: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("swarm key %s: %w", path, err)
	}
	if err := writeFileReplace(path, encodeSwarmKey(psk)); err != nil {
		return "", fmt.Errorf("swarm key %s: %w", path, err)
	}
	return old, nil
}
