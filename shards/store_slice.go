package shards

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// EnsureSlice returns the slice holding layers [a,b) of modelCID, cutting
// it first from the full model or from a wider slice the store holds.
// Errors wrap ErrUnknownModel, ErrLayerRange or ErrLayersNotHeld.
func (s *Store) EnsureSlice(modelCID string, a, b int) (SliceEntry, error) {
	return s.ensureSlice(context.Background(), modelCID, a, b, false)
}

// ensureSlice is EnsureSlice; onDemand marks a new slice as cut for a peer
// (evictable), and a slice the node asks for itself is never evictable.
func (s *Store) ensureSlice(ctx context.Context, modelCID string, a, b int, onDemand bool) (SliceEntry, error) {
	c, err := ParseModelCID(modelCID)
	if err != nil {
		return SliceEntry{}, err
	}
	modelCID = c.String()
	name := sliceName(modelCID, a, b)
	unlock, err := s.lock(ctx, name)
	if err != nil {
		return SliceEntry{}, err
	}
	defer unlock()
	if e, ok := s.Slice(modelCID, a, b); ok {
		if e.OnDemand && !onDemand {
			e.OnDemand = false
			s.mu.Lock()
			s.slices[name] = e
			err = s.saveLocked()
			s.mu.Unlock()
		}
		return e, err
	}
	src, layers, err := s.sliceSource(modelCID, a, b)
	if err != nil {
		return SliceEntry{}, err
	}
	tmp := filepath.Join(s.dir, ".tmp-slice-"+name)
	defer os.Remove(tmp)
	if _, err := Slice(src, tmp, a, b); err != nil {
		return SliceEntry{}, err
	}
	dst := filepath.Join(s.dir, name)
	fc, size, err := s.withProvenance(tmp, dst, modelCID)
	if err != nil {
		return SliceEntry{}, err
	}
	e := SliceEntry{Model: modelCID, From: a, To: b, Layers: layers, CID: fc, Size: size, Path: dst, OnDemand: onDemand, Added: time.Now().UTC()}
	if err := s.putSlice(e); err != nil {
		return SliceEntry{}, err
	}
	s.log.Info("shards: slice cut", "model", modelCID, "layers", fmt.Sprintf("%d-%d", a, b), "cid", fc, "from", filepath.Base(src))
	return e, nil
}

func (s *Store) putSlice(e SliceEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slices[filepath.Base(e.Path)] = e
	return s.saveLocked()
}

// sliceSource picks the file to cut [a,b) from: the full model, else the
// narrowest stored slice that covers the range. It also returns the
// model's layer count.
func (s *Store) sliceSource(modelCID string, a, b int) (string, int, error) {
	layers := 0
	if m, ok := s.Model(modelCID); ok {
		if a < 0 || b > m.Layers || a >= b {
			return "", 0, fmt.Errorf("shards: model %s: %w: [%d,%d) of %d layers", modelCID, ErrLayerRange, a, b, m.Layers)
		}
		return m.Path, m.Layers, nil
	}
	var best *SliceEntry
	known := false
	s.mu.Lock()
	for _, e := range s.slices {
		if e.Model != modelCID {
			continue
		}
		known, layers = true, e.Layers
		if e.From <= a && b <= e.To && (best == nil || e.To-e.From < best.To-best.From) {
			best = &e
		}
	}
	if _, ok := s.headers[modelCID]; ok {
		known = true
	}
	s.mu.Unlock()
	switch {
	case !known:
		return "", 0, fmt.Errorf("shards: %w %s", ErrUnknownModel, modelCID)
	case a < 0 || a >= b || (layers > 0 && b > layers):
		return "", 0, fmt.Errorf("shards: model %s: %w: [%d,%d) of %d layers", modelCID, ErrLayerRange, a, b, layers)
	case best == nil:
		return "", 0, fmt.Errorf("shards: model %s: %w: [%d,%d)", modelCID, ErrLayersNotHeld, a, b)
	}
	if _, ok := s.Slice(modelCID, best.From, best.To); !ok {
		return "", 0, fmt.Errorf("shards: model %s: %w: [%d,%d) (file vanished)", modelCID, ErrLayersNotHeld, a, b)
	}
	return best.Path, layers, nil
}

// pruneOnDemand removes the oldest slices cut for peers beyond keep.
func (s *Store) pruneOnDemand(keep int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var od []SliceEntry
	for _, e := range s.slices {
		if e.OnDemand {
			od = append(od, e)
		}
	}
	if len(od) <= keep {
		return
	}
	slices.SortFunc(od, func(a, b SliceEntry) int { return a.Added.Compare(b.Added) })
	for _, e := range od[:len(od)-keep] {
		// A transfer still reading the file keeps its open descriptor.
		delete(s.slices, filepath.Base(e.Path))
		os.Remove(e.Path)
		s.log.Info("shards: evicted on-demand slice", "model", e.Model, "layers", fmt.Sprintf("%d-%d", e.From, e.To))
	}
	if err := s.saveLocked(); err != nil {
		s.log.Warn("shards: saving store index", "err", err)
	}
}

// EnsureHeader returns the header-only file of modelCID, writing it from
// the full model or from any stored slice of it (they share the metadata).
func (s *Store) EnsureHeader(modelCID string) (HeaderEntry, error) {
	return s.ensureHeader(context.Background(), modelCID)
}

func (s *Store) ensureHeader(ctx context.Context, modelCID string) (HeaderEntry, error) {
	c, err := ParseModelCID(modelCID)
	if err != nil {
		return HeaderEntry{}, err
	}
	modelCID = c.String()
	name := headerName(modelCID)
	unlock, err := s.lock(ctx, name)
	if err != nil {
		return HeaderEntry{}, err
	}
	defer unlock()
	if e, ok := s.Header(modelCID); ok {
		return e, nil
	}
	src := ""
	if m, ok := s.Model(modelCID); ok {
		src = m.Path
	} else {
		s.mu.Lock()
		for _, e := range s.slices {
			if e.Model == modelCID {
				src = e.Path
				break
			}
		}
		s.mu.Unlock()
	}
	if src == "" {
		return HeaderEntry{}, fmt.Errorf("shards: %w %s", ErrUnknownModel, modelCID)
	}
	dst := filepath.Join(s.dir, name)
	var fc string
	var size int64
	err = s.writeFileAtomic(dst, func(w io.Writer) error {
		h := newHashWriter(w)
		if err := writeHeader(src, h, modelCID); err != nil {
			return err
		}
		fc, size = h.cid(), h.n
		return nil
	})
	if err != nil {
		return HeaderEntry{}, err
	}
	e := HeaderEntry{Model: modelCID, CID: fc, Size: size, Path: dst}
	s.mu.Lock()
	s.headers[modelCID] = e
	err = s.saveLocked()
	s.mu.Unlock()
	return e, err
}

// ImportSlice copies the slice file at path, holding some layers of model
// modelCID, into the store, adding SourceCIDKey when the file lacks it (a
// file naming another model is refused with ErrBadShard). A peer given a
// slice made elsewhere serves it under the same CID as peers that cut it.
func (s *Store) ImportSlice(path, modelCID string) (SliceEntry, error) {
	c, err := ParseModelCID(modelCID)
	if err != nil {
		return SliceEntry{}, err
	}
	modelCID = c.String()
	mi, err := ReadModelInfo(path)
	if err != nil {
		return SliceEntry{}, err
	}
	a, b := mi.LayerRange[0], mi.LayerRange[1]
	if a >= b || b > mi.Layers {
		return SliceEntry{}, fmt.Errorf("shards: %s: %w: holds layers [%d,%d) of %d", path, ErrLayerRange, a, b, mi.Layers)
	}
	if _, err := s.AdoptManifest(path); err != nil {
		return SliceEntry{}, err
	}
	if m, _, ok := s.Manifest(modelCID); ok {
		if err := m.VerifySlice(path, modelCID, a, b); err != nil {
			return SliceEntry{}, err
		}
	}
	name := sliceName(modelCID, a, b)
	unlock, err := s.lock(context.Background(), name)
	if err != nil {
		return SliceEntry{}, err
	}
	defer unlock()
	dst := filepath.Join(s.dir, name)
	fc, size, err := s.withProvenance(path, dst, modelCID)
	if err != nil {
		return SliceEntry{}, err
	}
	e := SliceEntry{Model: modelCID, From: a, To: b, Layers: mi.Layers, CID: fc, Size: size, Path: dst, Added: time.Now().UTC()}
	return e, s.putSlice(e)
}
