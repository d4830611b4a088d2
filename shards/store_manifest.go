package shards

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
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
	path := filepath.Join(s.dir, manifestName(c.String()))
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, false
	}
	// Checked once per version of the file: originators ask for it on
	// every generation.
	s.mu.Lock()
	cm, ok := s.manifests[c.String()]
	s.mu.Unlock()
	if ok && cm.size == st.Size() && cm.mod.Equal(st.ModTime()) {
		return cm.m, cm.b, true
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, false
	}
	m, err := DecodeManifest(b, c)
	if err != nil {
		s.log.Warn("shards: stored manifest does not match its root; ignoring it", "model", root, "err", err)
		return nil, nil, false
	}
	s.mu.Lock()
	if s.manifests == nil {
		s.manifests = map[string]cachedManifest{}
	}
	s.manifests[c.String()] = cachedManifest{m: m, b: b, size: st.Size(), mod: st.ModTime()}
	s.mu.Unlock()
	return m, b, true
}

// cachedManifest is a stored manifest already checked against its root,
// with the size and time of the file it was read from.
type cachedManifest struct {
	m    *Manifest
	b    []byte
	size int64
	mod  time.Time
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
