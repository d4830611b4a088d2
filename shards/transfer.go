package shards

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
)

const transferService = "swarm.shards"

// TransferServer answers TransferProtocol requests from a Store.
type TransferServer struct {
	// BreakAfterForTest, when > 0, ends the next response body after that
	// many bytes (the server half-closes the stream, as a connection that
	// dropped between two writes would look to the client). It then
	// resets to 0.
	BreakAfterForTest atomic.Int64
	// CorruptAtForTest, when > 0, flips the byte at that file offset in
	// the next response body that covers it. It then resets to 0.
	CorruptAtForTest atomic.Int64

	h   host.Host
	st  *Store
	log *slog.Logger
	cfg transferConfig
	sem chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	requests, served, bytesSent atomic.Int64
}

// A transfer server serves maxConcurrent requests at once (more are
// refused with CodeBusy), gives a client requestTimeout to send its
// request and lets a body write stall for idleTimeout at most. It cuts up
// to onDemand slices for peers from the full models or wider slices it
// holds, evicting the oldest such slice beyond onDemand so
// peers cannot fill the disk by asking for every range; 0 serves only the
// slices the node itself keeps.
type transferConfig struct {
	maxConcurrent  int
	onDemand       int
	requestTimeout time.Duration
	idleTimeout    time.Duration
}

// TransferOption configures NewTransferServer (tests set onDemand).
type TransferOption func(*transferConfig) error

// TransferStats counts a server's work since it started.
type TransferStats struct {
	Requests  int64 // streams accepted
	Served    int64 // bodies sent to the end
	BytesSent int64 // body bytes written
}

// NewTransferServer serves TransferProtocol on h from st until Close.
// log may be nil.
func NewTransferServer(h host.Host, st *Store, log *slog.Logger, opts ...TransferOption) (*TransferServer, error) {
	cfg := transferConfig{maxConcurrent: 4, onDemand: 4, requestTimeout: 10 * time.Second, idleTimeout: time.Minute}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &TransferServer{h: h, st: st, log: log, cfg: cfg, sem: make(chan struct{}, cfg.maxConcurrent)}
	srv.ctx, srv.cancel = context.WithCancel(context.Background())
	h.SetStreamHandler(TransferProtocol, srv.handle)
	return srv, nil
}

// Close stops serving: it removes the handler, resets streams in flight
// and waits for their handlers. It is idempotent.
func (srv *TransferServer) Close() error {
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		return nil
	}
	srv.closed = true
	srv.mu.Unlock()
	srv.h.RemoveStreamHandler(TransferProtocol)
	srv.cancel()
	srv.wg.Wait()
	return nil
}

// Stats returns the server's counters.
func (srv *TransferServer) Stats() TransferStats {
	return TransferStats{Requests: srv.requests.Load(), Served: srv.served.Load(), BytesSent: srv.bytesSent.Load()}
}

func (srv *TransferServer) handle(s network.Stream) {
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		s.Reset()
		return
	}
	srv.wg.Add(1)
	srv.mu.Unlock()
	defer srv.wg.Done()
	defer s.Close()
	stop := context.AfterFunc(srv.ctx, func() { s.Reset() })
	defer stop()
	if err := s.Scope().SetService(transferService); err != nil {
		s.Reset()
		return
	}
	srv.requests.Add(1)
	log := srv.log.With("peer", s.Conn().RemotePeer())

	_ = s.SetReadDeadline(time.Now().Add(srv.cfg.requestTimeout))
	req, err := decodeTransferRequest(s)
	if err != nil {
		code := CodeBadRequest
		if errors.Is(err, ErrLayerRange) {
			code = CodeBadRange
		}
		srv.refuse(s, log, code, err.Error())
		return
	}
	log = log.With("model", req.Model, "op", req.Op)
	if req.Op == OpSlice {
		log = log.With("layers", fmt.Sprintf("%d-%d", req.From, req.To))
	}
	select {
	case srv.sem <- struct{}{}:
		defer func() { <-srv.sem }()
	default:
		srv.refuse(s, log, CodeBusy, "too many transfers in progress")
		return
	}

	path, resp, err := srv.resolve(req)
	if err != nil {
		code, msg := describe(req, err)
		if code == CodeInternal {
			log.Warn("shards: cannot serve request", "err", err)
		}
		srv.refuse(s, log, code, msg)
		return
	}
	f, err := os.Open(path)
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil && st.Size() != resp.Size {
			err = fmt.Errorf("%s changed size: %d bytes, index says %d", path, st.Size(), resp.Size)
		}
	}
	if err != nil {
		log.Warn("shards: cannot open file to serve", "err", err)
		srv.refuse(s, log, CodeInternal, "file unavailable")
		return
	}
	defer f.Close()
	if req.Offset > resp.Size {
		srv.refuse(s, log, CodeBadOffset, fmt.Sprintf("offset %d past the end of the %d-byte file", req.Offset, resp.Size))
		return
	}
	resp.Offset = req.Offset
	_ = s.SetWriteDeadline(time.Now().Add(srv.cfg.idleTimeout))
	if err := writeFrame(s, resp); err != nil {
		s.Reset()
		return
	}
	start := time.Now()
	n, err := srv.sendBody(s, f, req.Offset, resp.Size)
	if err != nil {
		log.Debug("shards: transfer ended early", "sent", n, "err", err)
		if !errors.Is(err, errBrokenForTest) {
			s.Reset()
		}
		return
	}
	srv.served.Add(1)
	log.Debug("shards: served", "cid", resp.CID, "bytes", n, "offset", req.Offset, "ms", time.Since(start).Milliseconds())
}

func (srv *TransferServer) refuse(s network.Stream, log *slog.Logger, code, msg string) {
	log.Debug("shards: refused request", "code", code, "msg", msg)
	_ = s.SetWriteDeadline(time.Now().Add(srv.cfg.requestTimeout))
	if err := writeFrame(s, transferResponse{Code: code, Error: msg}); err != nil {
		s.Reset()
	}
}

// resolve finds (or makes) the file a request names.
func (srv *TransferServer) resolve(req transferRequest) (string, transferResponse, error) {
	switch req.Op {
	case OpSlice:
		e, ok := srv.st.Slice(req.Model, req.From, req.To)
		if !ok {
			if srv.cfg.onDemand == 0 {
				if _, _, err := srv.st.sliceSource(req.Model, req.From, req.To); err != nil {
					return "", transferResponse{}, err
				}
				return "", transferResponse{}, fmt.Errorf("%w: not cutting slices for peers", ErrLayersNotHeld)
			}
			var err error
			if e, err = srv.st.ensureSlice(srv.ctx, req.Model, req.From, req.To, true); err != nil {
				return "", transferResponse{}, err
			}
			srv.st.pruneOnDemand(srv.cfg.onDemand)
		}
		return e.Path, transferResponse{CID: e.CID, Size: e.Size, Layers: e.Layers}, nil
	case OpHeader:
		e, err := srv.st.ensureHeader(srv.ctx, req.Model)
		if err != nil {
			return "", transferResponse{}, err
		}
		return e.Path, transferResponse{CID: e.CID, Size: e.Size}, nil
	case OpManifest:
		_, b, ok := srv.st.Manifest(req.Model)
		if !ok {
			return "", transferResponse{}, ErrUnknownModel
		}
		c, _ := ParseModelCID(req.Model) // validated
		return filepath.Join(srv.st.dir, manifestName(req.Model)), transferResponse{CID: rawOf(c), Size: int64(len(b))}, nil
	default: // OpModel
		m, ok := srv.st.Model(req.Model)
		if !ok {
			if srv.st.knows(req.Model) {
				return "", transferResponse{}, fmt.Errorf("%w: only slices of it", ErrLayersNotHeld)
			}
			return "", transferResponse{}, ErrUnknownModel
		}
		fc := m.CID
		if m.FileCID != "" {
			fc = m.FileCID
		}
		return m.Path, transferResponse{CID: fc, Size: m.Size, Layers: m.Layers}, nil
	}
}

// describe turns a local error into a code and a message for the peer;
// the message never carries local paths.
func describe(req transferRequest, err error) (string, string) {
	what := "model " + req.Model
	if req.Op == OpSlice {
		what = fmt.Sprintf("layers [%d,%d) of model %s", req.From, req.To, req.Model)
	}
	switch {
	case errors.Is(err, ErrUnknownModel):
		return CodeUnknownModel, "no file of model " + req.Model
	case errors.Is(err, ErrLayerRange):
		return CodeBadRange, what + " do not exist"
	case errors.Is(err, ErrLayersNotHeld):
		return CodeNotHeld, what + " not held"
	}
	return CodeInternal, "cannot serve " + what
}

var errBrokenForTest = errors.New("shards: body cut by BreakAfterForTest")

// sendBody writes the file from off to size, each write with its own
// deadline so a stalled reader cannot hold a transfer slot forever.
func (srv *TransferServer) sendBody(s network.Stream, f *os.File, off, size int64) (int64, error) {
	brk := srv.BreakAfterForTest.Swap(0)
	flip := srv.CorruptAtForTest.Load()
	buf := make([]byte, 256<<10)
	var sent int64
	for pos := off; pos < size; {
		n := min(int64(len(buf)), size-pos)
		if brk > 0 {
			n = min(n, brk-sent)
		}
		b := buf[:n]
		if _, err := f.ReadAt(b, pos); err != nil && !(errors.Is(err, io.EOF) && pos+n == size) {
			return sent, err
		}
		if flip > 0 && flip >= pos && flip < pos+n && srv.CorruptAtForTest.CompareAndSwap(flip, 0) {
			b[flip-pos] ^= 0xff
		}
		_ = s.SetWriteDeadline(time.Now().Add(srv.cfg.idleTimeout))
		if _, err := s.Write(b); err != nil {
			return sent, err
		}
		sent += n
		pos += n
		srv.bytesSent.Add(n)
		if brk > 0 && sent >= brk && pos < size {
			return sent, errBrokenForTest
		}
	}
	return sent, nil
}
