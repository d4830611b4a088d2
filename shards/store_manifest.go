package shards

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func manifestName(root string) string { return root + ".manifest.json" }

// PutManifest stores manifest bytes b under root, after checking that they
// hash to root and decode. Storing the same manifest again is a no-op.
func (s *Store) PutManifest(root string, b []byte) (*Manifest, error) {
	c, err := ParseModelCID(root)
	if err != nil {
		return nil, err
	}
	if !IsRoot(c) {
		return nil, fmt.Errorf("%w: %s is a file CID, not a model root", ErrBadManifest, root)
	}
	m, err := DecodeManifest(b, c)
	if err != nil {
		return nil, err
	}
	dst := filepath.Join(s.dir, manifestName(c.String()))
	if old, err := os.ReadFile(dst); err == nil && string(old) == string(b) {
		return m, nil
	}
	if err := writeAtomic(dst, 0o644, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// Manifest returns the stored manifest of the model root, verified again
// against its root (a file edited on disk is not believed).
func (s *Store) Manifest(root string) (*Manifest, []byte, bool) {
	c, err := ParseModelCID(root)
	if err != nil || !IsRoot(c) {
		return nil, nil, false
	}
	b, err := os.ReadFile(filepath.Join(s.dir, manifestName(c.String())))
	if err != nil {
		return nil, nil, false
	}
	m, err := DecodeManifest(b, c)
	if err != nil {
		s.log.Warn("shards: stored manifest does not match its root; ignoring it", "model", root, "err", err)
		return nil, nil, false
	}
	return m, b, true
}

// RootOf returns the model root a name stands for in this store: a root
// itself, or the root of a full model the store holds whose file has the
// given file CID (a user may name a model by its file). ok is false for a
// file CID the store cannot map: only the whole file proves which model a
// file CID is, so no peer's word is taken for it.
func (s *Store) RootOf(name string) (string, bool) {
	c, err := ParseModelCID(name)
	if err != nil {
		return "", false
	}
	if IsRoot(c) {
		return c.String(), true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.models {
		if m.FileCID == c.String() {
			return m.CID, true
		}
	}
	return "", false
}
