package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

type fetchConfig struct {
	expect          string
	progress        func(done, total int64)
	log             *slog.Logger
	maxSize         int64
	responseTimeout time.Duration
	idleTimeout     time.Duration
	noResume        bool
	blame           func(peer.ID, error)
	received        func(peer.ID, int64)
}

// WithReceived calls fn with the bytes a peer sent of a file whose whole
// arrived and hashed right, each time one does: what this peer can
// acknowledge to it (a resumed download's earlier bytes are not its).
func WithReceived(fn func(p peer.ID, n int64)) FetchOption {
	return func(cfg *fetchConfig) error { cfg.received = fn; return nil }
}

// WithBlame calls fn when the fetch shows that a peer other than the one
// fetched from sent bad bytes: the prefix of a resumed download that did
// not hash right, while the whole file fetched again did. (A peer could
// otherwise send junk under an honest file's CID, drop the stream, and
// leave the honest peer to take the blame, or the fetch to fail.)
func WithBlame(fn func(p peer.ID, err error)) FetchOption {
	return func(cfg *fetchConfig) error { cfg.blame = fn; return nil }
}

// WithoutResume deletes what a failed fetch received instead of keeping
// it to resume (for fetches that will not be retried).
func WithoutResume() FetchOption {
	return func(cfg *fetchConfig) error { cfg.noResume = true; return nil }
}

// FetchOption configures Fetch, FetchHeader and FetchModel.
type FetchOption func(*fetchConfig) error

// WithExpectedCID makes the fetch accept only a file with this CID (from a
// manifest or a signed announcement). Without it a slice is checked against
// the CID the serving peer announces plus its own metadata.
func WithExpectedCID(c string) FetchOption {
	return func(cfg *fetchConfig) error {
		pc, err := ParseCID(c)
		if err != nil {
			return err
		}
		cfg.expect = pc.String()
		return nil
	}
}

// WithProgress reports bytes held so far and the file's size. fn runs on
// its own goroutine and only ever sees the latest figures, so a slow fn
// never slows the transfer; the last call happens before the fetch returns.
func WithProgress(fn func(done, total int64)) FetchOption {
	return func(cfg *fetchConfig) error { cfg.progress = fn; return nil }
}

// WithFetchLogger sets the logger (default: discard).
func WithFetchLogger(l *slog.Logger) FetchOption {
	return func(cfg *fetchConfig) error { cfg.log = l; return nil }
}

// WithFetchTimeouts sets how long to wait for the server's answer, which
// may include cutting the slice (default 10m), and how long the body may
// stall (default 1m).
func WithFetchTimeouts(response, idle time.Duration) FetchOption {
	return func(cfg *fetchConfig) error {
		if response <= 0 || idle <= 0 {
			return fmt.Errorf("shards: fetch timeouts must be positive")
		}
		cfg.responseTimeout, cfg.idleTimeout = response, idle
		return nil
	}
}

func newFetchConfig(opts []FetchOption, maxSize int64) (*fetchConfig, error) {
	cfg := &fetchConfig{}
	for _, o := range opts {
		if err := o(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	cfg.maxSize = maxSize // files the server announces as larger are refused
	if cfg.responseTimeout == 0 {
		cfg.responseTimeout, cfg.idleTimeout = 10*time.Minute, time.Minute
	}
	return cfg, nil
}

// Fetch downloads layers [a,b) of model modelCID from peer p into st and
// returns the stored slice (at once if st already has it). An interrupted
// download leaves <name>.partial in the store and the next Fetch resumes
// it. The finished file must hash to the CID the peer announced (and to
// WithExpectedCID's), parse as GGUF, hold exactly layers [a,b) and name
// modelCID under SourceCIDKey; otherwise it is deleted and the error wraps
// ErrCIDMismatch or ErrBadShard. Refusals are *TransferError.
//
// SourceCIDKey is the serving peer's claim: only a CID from a trusted
// source (WithExpectedCID) proves the slice is really of that model.
func Fetch(ctx context.Context, h host.Host, p peer.ID, st *Store, modelCID string, a, b int, opts ...FetchOption) (SliceEntry, error) {
	cfg, err := newFetchConfig(opts, 1<<40)
	if err != nil {
		return SliceEntry{}, err
	}
	c, err := ParseModelCID(modelCID)
	if err != nil {
		return SliceEntry{}, err
	}
	modelCID = c.String()
	if a < 0 || b <= a || b > maxLayers {
		return SliceEntry{}, fmt.Errorf("shards: %w: [%d,%d)", ErrLayerRange, a, b)
	}
	man, err := manifestFor(ctx, h, p, st, modelCID, cfg)
	if err != nil {
		return SliceEntry{}, err
	}
	if man != nil && b > man.Layers {
		return SliceEntry{}, fmt.Errorf("shards: %w: [%d,%d) of a %d-layer model", ErrLayerRange, a, b, man.Layers)
	}
	name := sliceName(modelCID, a, b)
	unlock, err := st.lock(ctx, name)
	if err != nil {
		return SliceEntry{}, err
	}
	defer unlock()
	if e, ok := st.Slice(modelCID, a, b); ok && (cfg.expect == "" || cfg.expect == e.CID) {
		return e, nil
	}
	dst := filepath.Join(st.dir, name)
	req := transferRequest{Op: OpSlice, Model: modelCID, From: a, To: b}
	if man != nil {
		// The manifest bounds the file, and so what one source may make
		// this peer download for it: a liar's slice costs at most an
		// honest one.
		cfg.maxSize = min(cfg.maxSize, man.sliceBound(a, b))
	}
	resp, err := download(ctx, h, p, st, req, dst, cfg)
	if err != nil && cfg.noResume {
		discardPartial(dst)
	}
	if err != nil {
		return SliceEntry{}, fmt.Errorf("shards: fetching layers [%d,%d) of %s from %s: %w", a, b, modelCID, p, err)
	}
	var layers int
	if man != nil {
		layers, err = man.Layers, man.VerifySlice(dst+".partial", modelCID, a, b)
	} else {
		layers, err = checkSlice(dst+".partial", modelCID, a, b)
	}
	if err != nil {
		discardPartial(dst)
		cfg.log.Warn("shards: refused a slice", "peer", p, "model", modelCID, "layers", fmt.Sprintf("%d-%d", a, b), "err", err)
		return SliceEntry{}, fmt.Errorf("shards: slice from %s rejected: %w", p, err)
	}
	e := SliceEntry{Model: modelCID, From: a, To: b, Layers: layers, CID: resp.CID, Size: resp.Size, Path: dst, Added: time.Now().UTC()}
	if err := commitPartial(dst); err != nil {
		return SliceEntry{}, err
	}
	if err := st.putSlice(e); err != nil {
		return SliceEntry{}, err
	}
	cfg.log.Info("shards: fetched slice", "peer", p, "model", modelCID, "layers", fmt.Sprintf("%d-%d", a, b), "cid", e.CID)
	return e, nil
}

// FetchHeader downloads the header-only GGUF of modelCID (all metadata, no
// tensors) from p into st and returns its path.
func FetchHeader(ctx context.Context, h host.Host, p peer.ID, st *Store, modelCID string, opts ...FetchOption) (string, error) {
	cfg, err := newFetchConfig(opts, 256<<20)
	if err != nil {
		return "", err
	}
	c, err := ParseModelCID(modelCID)
	if err != nil {
		return "", err
	}
	modelCID = c.String()
	man, err := manifestFor(ctx, h, p, st, modelCID, cfg)
	if err != nil {
		return "", err
	}
	name := headerName(modelCID)
	unlock, err := st.lock(ctx, name)
	if err != nil {
		return "", err
	}
	defer unlock()
	if e, ok := st.Header(modelCID); ok {
		return e.Path, nil
	}
	if man != nil {
		cfg.maxSize = min(cfg.maxSize, man.headerBound())
	}
	dst := filepath.Join(st.dir, name)
	resp, err := download(ctx, h, p, st, transferRequest{Op: OpHeader, Model: modelCID}, dst, cfg)
	if err != nil {
		return "", fmt.Errorf("shards: fetching the header of %s from %s: %w", modelCID, p, err)
	}
	if man != nil {
		err = man.VerifyHeader(dst+".partial", modelCID)
	} else {
		err = checkHeader(dst+".partial", modelCID)
	}
	if err != nil {
		discardPartial(dst)
		cfg.log.Warn("shards: refused a header", "peer", p, "model", modelCID, "err", err)
		return "", fmt.Errorf("shards: header from %s rejected: %w", p, err)
	}
	if err := commitPartial(dst); err != nil {
		return "", err
	}
	st.mu.Lock()
	st.headers[modelCID] = HeaderEntry{Model: modelCID, CID: resp.CID, Size: resp.Size, Path: dst}
	err = st.saveLocked()
	st.mu.Unlock()
	return dst, err
}

// FetchModel downloads the whole model file modelCID from p into st as
// <cid>.gguf. Its bytes must hash to modelCID itself.
func FetchModel(ctx context.Context, h host.Host, p peer.ID, st *Store, modelCID string, opts ...FetchOption) (ModelEntry, error) {
	c, err := ParseModelCID(modelCID)
	if err != nil {
		return ModelEntry{}, err
	}
	modelCID = c.String()
	base, err := newFetchConfig(opts, 1<<40)
	if err != nil {
		return ModelEntry{}, err
	}
	file := modelCID
	man, err := manifestFor(ctx, h, p, st, modelCID, base)
	if err != nil {
		return ModelEntry{}, err
	}
	if man != nil {
		file = man.File // the manifest commits to the whole file's hash
	}
	cfg, err := newFetchConfig(append(slices.Clip(opts), WithExpectedCID(file)), 1<<40)
	if err != nil {
		return ModelEntry{}, err
	}
	name := modelName(modelCID)
	unlock, err := st.lock(ctx, name)
	if err != nil {
		return ModelEntry{}, err
	}
	defer unlock()
	if m, ok := st.Model(modelCID); ok {
		return m, nil
	}
	dst := filepath.Join(st.dir, name)
	if _, err := download(ctx, h, p, st, transferRequest{Op: OpModel, Model: modelCID}, dst, cfg); err != nil {
		return ModelEntry{}, fmt.Errorf("shards: fetching model %s from %s: %w", modelCID, p, err)
	}
	mi, err := ReadModelInfo(dst + ".partial")
	if err == nil && (mi.Layers <= 0 || mi.LayerRange != [2]int{0, mi.Layers}) {
		err = fmt.Errorf("%w: holds layers [%d,%d) of %d", ErrNotFullModel, mi.LayerRange[0], mi.LayerRange[1], mi.Layers)
	}
	if err != nil {
		discardPartial(dst)
		return ModelEntry{}, fmt.Errorf("shards: model from %s rejected: %w", p, err)
	}
	if err := commitPartial(dst); err != nil {
		return ModelEntry{}, err
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return ModelEntry{}, fmt.Errorf("shards: %w", err)
	}
	m := ModelEntry{CID: modelCID, Path: dst, Size: fi.Size(), ModTime: fi.ModTime(), Layers: mi.Layers, Arch: mi.Arch, Name: mi.Name}
	if man != nil {
		m.FileCID = man.File
	}
	return m, st.putModel(m)
}

// BadSource reports whether err, from Fetch, FetchHeader, FetchModel or
// FetchManifest, says the source sent a file that failed its check: bytes
// not hashing to the CID it announced or to the one expected, a file that
// is not the shard asked for or does not match the model's manifest, or
// one announced larger than the manifest allows. That is evidence against
// the source; a refusal, a dropped stream or a cancelled fetch is not.
func BadSource(err error) bool {
	if errors.Is(err, errResumed) {
		return false
	}
	for _, e := range []error{ErrCIDMismatch, ErrBadShard, ErrMismatch, ErrBadManifest, ErrTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// errResumed marks a CID mismatch of a resumed download: the prefix came
// from an earlier attempt, perhaps from another peer that announced the
// same file, so whose bytes were wrong is unknown. download then fetches
// the whole file again from the same peer to tell.
var errResumed = errors.New("resumed from an earlier attempt's bytes")

// checkHeader checks a header-only file of a model named by its file CID.
func checkHeader(path, modelCID string) error {
	g, err := ReadGGUFFile(path)
	if err == nil && len(g.Tensors) > 0 {
		err = fmt.Errorf("%w: header-only file has %d tensors", ErrBadShard, len(g.Tensors))
	}
	if err == nil && g.String(SourceCIDKey) != modelCID {
		err = fmt.Errorf("%w: header names model %q, want %s", ErrBadShard, g.String(SourceCIDKey), modelCID)
	}
	return err
}

// checkSlice checks that the GGUF at path is layers [a,b) of modelCID and
// returns the model's layer count.
func checkSlice(path, modelCID string, a, b int) (int, error) {
	g, err := ReadGGUFFile(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadShard, err)
	}
	if src := g.String(SourceCIDKey); src != modelCID {
		return 0, fmt.Errorf("%w: %s says model %q, want %s", ErrBadShard, SourceCIDKey, src, modelCID)
	}
	mi := g.ModelInfo()
	if mi.LayerRange != [2]int{a, b} || b > mi.Layers {
		return 0, fmt.Errorf("%w: holds layers [%d,%d) of %d, want [%d,%d)", ErrBadShard, mi.LayerRange[0], mi.LayerRange[1], mi.Layers, a, b)
	}
	present := make(map[int]bool, b-a)
	for _, t := range g.Tensors {
		if l := layerOf(t.Name); l >= 0 {
			present[l] = true
		}
	}
	for l := a; l < b; l++ {
		if !present[l] {
			return 0, fmt.Errorf("%w: layer %d missing", ErrBadShard, l)
		}
	}
	if a == 0 && !mi.HasEmbedding {
		return 0, fmt.Errorf("%w: first stage without token_embd", ErrBadShard)
	}
	if b == mi.Layers && !mi.HasHead {
		return 0, fmt.Errorf("%w: last stage without the output head", ErrBadShard)
	}
	return mi.Layers, nil
}

// partialState is <name>.partial.json: what the partial file is a prefix
// of, so a resume from a peer serving a different file starts over.
type partialState struct {
	CID  string `json:"cid"`
	Size int64  `json:"size"`
	Peer string `json:"peer,omitempty"` // who sent it
}

func discardPartial(dst string) {
	os.Remove(dst + ".partial")
	os.Remove(dst + ".partial.json")
}

func commitPartial(dst string) error {
	if err := os.Rename(dst+".partial", dst); err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	os.Remove(dst + ".partial.json")
	return nil
}

// download fetches the file req names into dst+".partial", resuming what
// an earlier attempt left there, and verifies it hashes to the CID the
// server announced (and cfg.expect).
func download(ctx context.Context, h host.Host, p peer.ID, st *Store, req transferRequest, dst string, cfg *fetchConfig) (transferResponse, error) {
	partial, sidePath := dst+".partial", dst+".partial.json"
	prefixFrom := "" // who sent the prefix of a resumed download that did not hash right
	for attempt := 0; ; attempt++ {
		var off int64
		var prev partialState
		if fi, err := os.Stat(partial); err == nil {
			off = fi.Size()
			if b, err := os.ReadFile(sidePath); err != nil || json.Unmarshal(b, &prev) != nil {
				off = 0 // a prefix of what? unknowable: start over
			}
		}
		req.Offset = off
		s, resp, err := request(ctx, h, p, req, cfg)
		if err != nil {
			if off > 0 && attempt == 0 && errors.Is(err, ErrBadOffset) {
				discardPartial(dst)
				continue
			}
			return transferResponse{}, err
		}
		if off > 0 && (prev.CID != resp.CID || prev.Size != resp.Size) {
			s.Reset()
			if attempt > 0 {
				return transferResponse{}, fmt.Errorf("%w: server changed the file during the fetch", ErrInterrupted)
			}
			cfg.log.Info("shards: peer serves a different file than the partial download, starting over", "peer", p, "model", req.Model)
			discardPartial(dst)
			continue
		}
		if cfg.expect != "" && resp.CID != cfg.expect {
			s.Reset()
			return transferResponse{}, fmt.Errorf("%w: peer offers %s, want %s", ErrCIDMismatch, resp.CID, cfg.expect)
		}
		if resp.Size > cfg.maxSize {
			s.Reset()
			return transferResponse{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, resp.Size, cfg.maxSize)
		}
		if off == 0 {
			err = st.writeFileAtomic(sidePath, func(w io.Writer) error {
				return json.NewEncoder(w).Encode(partialState{CID: resp.CID, Size: resp.Size, Peer: p.String()})
			})
			if err != nil {
				s.Reset()
				return transferResponse{}, err
			}
		}
		err = receive(ctx, s, partial, resp, cfg)
		if errors.Is(err, ErrCIDMismatch) {
			discardPartial(dst)
			if errors.Is(err, errResumed) && attempt == 0 {
				// Fetch the whole file from p: if it hashes right, the
				// prefix was bad, and whoever sent it is to blame.
				prefixFrom = prev.Peer
				continue
			}
		}
		if err == nil && prefixFrom != "" && prefixFrom != p.String() && cfg.blame != nil {
			if id, perr := peer.Decode(prefixFrom); perr == nil {
				cfg.blame(id, fmt.Errorf("%w: the first bytes it sent of %s did not belong to that file", ErrCIDMismatch, resp.CID))
			}
		}
		return resp, err
	}
}

// request opens a stream, sends req and reads the answer. On success the
// stream is positioned at the body and reset when ctx ends.
func request(ctx context.Context, h host.Host, p peer.ID, req transferRequest, cfg *fetchConfig) (network.Stream, transferResponse, error) {
	s, err := h.NewStream(ctx, p, TransferProtocol)
	if err != nil {
		return nil, transferResponse{}, fmt.Errorf("opening %s: %w", TransferProtocol, err)
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	_ = s.SetDeadline(time.Now().Add(cfg.responseTimeout))
	err = writeFrame(s, req)
	var resp transferResponse
	if err == nil {
		resp, err = decodeTransferResponse(s, req)
	}
	if err == nil && resp.Code != "" {
		s.Close()
		stop()
		return nil, transferResponse{}, &TransferError{Peer: p, Op: req.Op, Code: cleanMsg(resp.Code), Msg: cleanMsg(resp.Error)}
	}
	if err != nil {
		s.Reset()
		stop()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, transferResponse{}, err
	}
	return &ctxStream{Stream: s, stop: stop}, resp, nil
}

// ctxStream releases the context hook when the stream is done with.
type ctxStream struct {
	network.Stream
	stop func() bool
}

func (c *ctxStream) Close() error { c.stop(); return c.Stream.Close() }
func (c *ctxStream) Reset() error { c.stop(); return c.Stream.Reset() }

// receive appends the body to partial (which holds resp.Offset bytes) and
// checks the whole file's CID. A short body leaves the partial in place.
func receive(ctx context.Context, s network.Stream, partial string, resp transferResponse, cfg *fetchConfig) (err error) {
	defer func() {
		if err != nil {
			s.Reset()
		} else {
			s.Close()
		}
	}()
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	off := resp.Offset
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	hw := newHashWriter(io.Discard)
	if _, err := io.Copy(hw, io.NewSectionReader(f, 0, off)); err != nil {
		return fmt.Errorf("shards: rehashing %s: %w", partial, err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	hw.w = f
	prog := startProgress(cfg.progress)
	defer prog.close()
	prog.set(off, resp.Size)
	buf := make([]byte, 256<<10)
	done := off
	for done < resp.Size {
		_ = s.SetReadDeadline(time.Now().Add(cfg.idleTimeout))
		n, rerr := s.Read(buf[:min(int64(len(buf)), resp.Size-done)])
		if n > 0 {
			if _, err := hw.Write(buf[:n]); err != nil {
				return fmt.Errorf("shards: writing %s: %w", partial, err)
			}
			done += int64(n)
			prog.set(done, resp.Size)
		}
		if rerr != nil && done < resp.Size {
			f.Sync() // keep what arrived for the next attempt
			if ctx.Err() != nil {
				rerr = ctx.Err()
			}
			return fmt.Errorf("%w at byte %d of %d: %w", ErrInterrupted, done, resp.Size, rerr)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	// hw hashed the earlier prefix and this body: the whole file.
	if got := hw.cid(); got != resp.CID {
		if off > 0 {
			return fmt.Errorf("%w: %w at byte %d: %d bytes hash to %s, peer announced %s", ErrCIDMismatch, errResumed, off, resp.Size, got, resp.CID)
		}
		return fmt.Errorf("%w: received %d bytes hashing to %s, peer announced %s", ErrCIDMismatch, resp.Size, got, resp.CID)
	}
	if cfg.received != nil && done > off {
		cfg.received(s.Conn().RemotePeer(), done-off)
	}
	return nil
}

// progress hands the latest figures to a callback on its own goroutine, so
// the transfer never waits for the callback; updates in between coalesce.
type progress struct {
	fn          func(done, total int64)
	done, total atomic.Int64
	kick        chan struct{}
	stop        chan struct{}
	finished    chan struct{}
}

func startProgress(fn func(done, total int64)) *progress {
	if fn == nil {
		return nil
	}
	p := &progress{fn: fn, kick: make(chan struct{}, 1), stop: make(chan struct{}), finished: make(chan struct{})}
	go p.run()
	return p
}

func (p *progress) set(done, total int64) {
	if p == nil {
		return
	}
	p.done.Store(done)
	p.total.Store(total)
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *progress) run() {
	defer close(p.finished)
	last := int64(-1)
	report := func() {
		if d := p.done.Load(); d != last {
			last = d
			p.fn(d, p.total.Load())
		}
	}
	for {
		select {
		case <-p.kick:
			report()
		case <-p.stop:
			report()
			return
		}
	}
}

// close delivers the final figures and waits for the callback to return.
func (p *progress) close() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.finished
}
