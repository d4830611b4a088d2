package shards

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Store is a directory of model files named by content:
//
//	<cid>.gguf            a full model (fetched or imported)
//	<cid>.<a>-<b>.gguf    layers [a,b) of model <cid>, carrying SourceCIDKey
//	<cid>.header.gguf     the model's metadata with zero tensors
//	<name>.partial(.json) a download in progress (kept to resume it)
//	index.json            what the store holds (see storeIndex)
//
// Full models added with AddModel stay where they are; the index records
// their path, size and modification time, and forgets them when the file
// changes. Every write goes to a temp file renamed into place, so a crash
// never leaves a half-written file under a final name. A Store is safe for
// concurrent use by one process; two processes must not share a directory.
type Store struct {
	dir string
	log *slog.Logger

	mu      sync.Mutex
	models  map[string]ModelEntry
	slices  map[string]SliceEntry  // by slice file name
	headers map[string]HeaderEntry // by model CID
	// manifests caches the stored manifests read so far, by root.
	manifests map[string]cachedManifest
	busy      map[string]chan struct{}
}

// ModelEntry is a full model the store can slice and serve.
type ModelEntry struct {
	CID     string    `json:"cid"`                // the model's root (its manifest's CID)
	FileCID string    `json:"file_cid,omitempty"` // the file's own CID
	Path    string    `json:"path"`               // absolute in the API; a bare name in the index when inside the store
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	Layers  int       `json:"layers"`
	Arch    string    `json:"arch,omitempty"`
	Name    string    `json:"name,omitempty"`
}

// SliceEntry is a stage file holding layers [From,To) of model Model.
type SliceEntry struct {
	Model    string    `json:"model"`
	From     int       `json:"from"`
	To       int       `json:"to"`
	Layers   int       `json:"layers"` // the model's block count
	CID      string    `json:"cid"`    // the slice file's own CID
	Size     int64     `json:"size"`
	Path     string    `json:"path"`
	OnDemand bool      `json:"on_demand,omitempty"` // cut for a peer, may be evicted
	Added    time.Time `json:"added"`
}

// HeaderEntry is a header-only GGUF of a model (see WriteHeader).
type HeaderEntry struct {
	Model string `json:"model"`
	CID   string `json:"cid"`
	Size  int64  `json:"size"`
	Path  string `json:"path"`
}

// SourceCIDKey is the GGUF metadata key the store adds to every slice and
// header it writes: the CID of the full model they come from. Slice keeps
// all metadata, so a slice cut from a slice keeps it too, and peers that cut
// the same range of the same model produce byte-identical files.
const SourceCIDKey = "swarm.source_cid"

// ErrNotFullModel is returned by AddModel for a file missing layers.
var ErrNotFullModel = errors.New("shards: not a full model")

const indexName = "index.json"

type storeIndex struct {
	Version int           `json:"version"`
	Models  []ModelEntry  `json:"models"`
	Slices  []SliceEntry  `json:"slices"`
	Headers []HeaderEntry `json:"headers"`
}

// StoreOption configures OpenStore.
type StoreOption func(*Store) error

// WithStoreLogger sets the store's logger (default: discard).
func WithStoreLogger(l *slog.Logger) StoreOption {
	return func(s *Store) error { s.log = l; return nil }
}

// OpenStore opens (creating it if needed) the store in dir. Entries whose
// files vanished or changed are dropped; stale temp files are removed;
// partial downloads are kept.
func OpenStore(dir string, opts ...StoreOption) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	s := &Store{dir: abs, models: map[string]ModelEntry{}, slices: map[string]SliceEntry{},
		headers: map[string]HeaderEntry{}, busy: map[string]chan struct{}{}}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("shards: store: %w", err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(abs, ".tmp-*")); len(tmps) > 0 {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	b, err := os.ReadFile(filepath.Join(abs, indexName))
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("shards: store: %w", err)
	}
	var idx storeIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("shards: store %s: corrupt %s: %w", abs, indexName, err)
	}
	dropped := 0
	for _, m := range idx.Models {
		m.Path = s.abs(m.Path)
		if st, err := os.Stat(m.Path); err != nil || st.Size() != m.Size || !st.ModTime().Equal(m.ModTime) {
			s.log.Warn("shards: model file changed or missing, forgetting it", "model", m.CID, "path", m.Path)
			dropped++
			continue
		}
		s.models[m.CID] = m
	}
	for _, e := range idx.Slices {
		e.Path = s.abs(e.Path)
		if st, err := os.Stat(e.Path); err != nil || st.Size() != e.Size {
			dropped++
			continue
		}
		s.slices[filepath.Base(e.Path)] = e
	}
	for _, e := range idx.Headers {
		e.Path = s.abs(e.Path)
		if st, err := os.Stat(e.Path); err != nil || st.Size() != e.Size {
			dropped++
			continue
		}
		s.headers[e.Model] = e
	}
	if dropped > 0 {
		s.mu.Lock()
		err = s.saveLocked()
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) abs(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.dir, filepath.Base(p))
}

// rel is how a path is written in the index: a bare name inside the store,
// so the directory can move.
func (s *Store) rel(p string) string {
	if filepath.Dir(p) == s.dir {
		return filepath.Base(p)
	}
	return p
}

func sliceName(model string, a, b int) string { return fmt.Sprintf("%s.%d-%d.gguf", model, a, b) }
func headerName(model string) string          { return model + ".header.gguf" }
func modelName(model string) string           { return model + ".gguf" }

// saveLocked writes index.json atomically. s.mu must be held.
func (s *Store) saveLocked() error {
	idx := storeIndex{Version: 1}
	for _, m := range s.models {
		m.Path = s.rel(m.Path)
		idx.Models = append(idx.Models, m)
	}
	for _, e := range s.slices {
		e.Path = s.rel(e.Path)
		idx.Slices = append(idx.Slices, e)
	}
	for _, e := range s.headers {
		e.Path = s.rel(e.Path)
		idx.Headers = append(idx.Headers, e)
	}
	slices.SortFunc(idx.Models, func(a, b ModelEntry) int { return cmp.Compare(a.CID, b.CID) })
	slices.SortFunc(idx.Slices, compareSlices)
	slices.SortFunc(idx.Headers, func(a, b HeaderEntry) int { return cmp.Compare(a.Model, b.Model) })
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("shards: store index: %w", err)
	}
	return s.writeFileAtomic(filepath.Join(s.dir, indexName), func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

func compareSlices(a, b SliceEntry) int {
	return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
}

// writeFileAtomic writes dst, a file of the store, through a synced temp
// file renamed into place.
func (s *Store) writeFileAtomic(dst string, write func(io.Writer) error) error {
	return writeAtomic(dst, 0, write)
}

// lock serialises work on one file name (producing a slice, downloading
// it) so two callers never write the same temp or partial file; the second
// caller then finds the first one's result.
func (s *Store) lock(ctx context.Context, name string) (unlock func(), err error) {
	for {
		s.mu.Lock()
		ch, held := s.busy[name]
		if !held {
			ch = make(chan struct{})
			s.busy[name] = ch
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.busy, name)
				s.mu.Unlock()
				close(ch)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// AddModel registers the full GGUF model at path without copying it: it
// reads the file once (which takes a while for a big model) to build the
// model's manifest, checks that it holds every layer, stores the manifest
// and records the model under its root. A model already registered from
// the same unchanged file is not read again.
func (s *Store) AddModel(path string) (ModelEntry, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ModelEntry{}, fmt.Errorf("shards: %w", err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return ModelEntry{}, fmt.Errorf("shards: %w", err)
	}
	s.mu.Lock()
	for _, e := range s.models {
		if e.Path == abs && e.Size == st.Size() && e.ModTime.Equal(st.ModTime()) && e.FileCID != "" {
			s.mu.Unlock()
			if _, _, ok := s.Manifest(e.CID); ok {
				return e, nil
			}
			s.mu.Lock()
			break
		}
	}
	s.mu.Unlock()
	mi, err := ReadModelInfo(abs)
	if err != nil {
		return ModelEntry{}, err
	}
	if mi.Layers <= 0 || !mi.isFull() {
		return ModelEntry{}, fmt.Errorf("shards: %s: %w: holds layers [%d,%d) of %d", abs, ErrNotFullModel, mi.LayerRange[0], mi.LayerRange[1], mi.Layers)
	}
	_, b, root, err := BuildManifest(abs)
	if err != nil {
		return ModelEntry{}, err
	}
	m, err := s.PutManifest(root.String(), b)
	if err != nil {
		return ModelEntry{}, err
	}
	e := ModelEntry{CID: root.String(), FileCID: m.File, Path: abs, Size: st.Size(), ModTime: st.ModTime(), Layers: mi.Layers, Arch: mi.Arch, Name: mi.Name}
	s.mu.Lock()
	for k, old := range s.models {
		if old.Path == abs {
			delete(s.models, k) // the file changed, or was registered by its file CID before manifests
		}
	}
	s.mu.Unlock()
	if err := s.putModel(e); err != nil {
		return ModelEntry{}, err
	}
	s.log.Info("shards: model added", "model", e.CID, "file_cid", e.FileCID, "path", abs, "layers", mi.Layers)
	return e, nil
}

func (s *Store) putModel(e ModelEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models[e.CID] = e
	return s.saveLocked()
}

// Model returns the full model with CID modelCID, if the store has it and
// its file is unchanged.
func (s *Store) Model(modelCID string) (ModelEntry, bool) {
	s.mu.Lock()
	e, ok := s.models[modelCID]
	if !ok {
		for _, m := range s.models {
			if m.FileCID == modelCID && modelCID != "" {
				e, ok = m, true
				break
			}
		}
	}
	s.mu.Unlock()
	if !ok {
		return ModelEntry{}, false
	}
	modelCID = e.CID
	if st, err := os.Stat(e.Path); err != nil || st.Size() != e.Size || !st.ModTime().Equal(e.ModTime) {
		s.forget(func() { delete(s.models, modelCID) })
		s.log.Warn("shards: model file changed or missing, forgetting it", "model", modelCID, "path", e.Path)
		return ModelEntry{}, false
	}
	return e, true
}

// Slice returns the stored slice holding exactly layers [a,b) of modelCID.
func (s *Store) Slice(modelCID string, a, b int) (SliceEntry, bool) {
	name := sliceName(modelCID, a, b)
	s.mu.Lock()
	e, ok := s.slices[name]
	s.mu.Unlock()
	if !ok {
		return SliceEntry{}, false
	}
	if st, err := os.Stat(e.Path); err != nil || st.Size() != e.Size {
		s.forget(func() { delete(s.slices, name) })
		return SliceEntry{}, false
	}
	return e, true
}

// Header returns the stored header-only file of modelCID.
func (s *Store) Header(modelCID string) (HeaderEntry, bool) {
	s.mu.Lock()
	e, ok := s.headers[modelCID]
	s.mu.Unlock()
	if !ok {
		return HeaderEntry{}, false
	}
	if st, err := os.Stat(e.Path); err != nil || st.Size() != e.Size {
		s.forget(func() { delete(s.headers, modelCID) })
		return HeaderEntry{}, false
	}
	return e, true
}

func (s *Store) forget(del func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	del()
	if err := s.saveLocked(); err != nil {
		s.log.Warn("shards: saving store index", "err", err)
	}
}

// List returns the full models and the slices the store holds, sorted.
func (s *Store) List() ([]ModelEntry, []SliceEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := make([]ModelEntry, 0, len(s.models))
	for _, m := range s.models {
		ms = append(ms, m)
	}
	ss := make([]SliceEntry, 0, len(s.slices))
	for _, e := range s.slices {
		ss = append(ss, e)
	}
	slices.SortFunc(ms, func(a, b ModelEntry) int { return cmp.Compare(a.CID, b.CID) })
	slices.SortFunc(ss, compareSlices)
	return ms, ss
}

// RemoveSlice deletes a stored slice and its file.
func (s *Store) RemoveSlice(modelCID string, a, b int) error {
	name := sliceName(modelCID, a, b)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.slices[name]
	if !ok {
		return nil
	}
	delete(s.slices, name)
	if err := os.Remove(e.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shards: %w", err)
	}
	return s.saveLocked()
}

// knows reports whether the store holds any file of modelCID.
func (s *Store) knows(modelCID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.models[modelCID]; ok {
		return true
	}
	if _, ok := s.headers[modelCID]; ok {
		return true
	}
	for _, e := range s.slices {
		if e.Model == modelCID {
			return true
		}
	}
	return false
}
