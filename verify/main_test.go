package verify

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"go.uber.org/goleak"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/gputest"
	"github.com/llmswarm/llmswarm/internal/nettest"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

var (
	testDir  string
	filesMu  sync.Mutex
	files    = map[string]string{} // key -> path
	fileCIDs = map[string]string{} // model path -> CID
)

func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	d, err := os.MkdirTemp("", "verify-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = d
	if err := gputest.Setup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(d)
	if code == 0 {
		if err := goleak.Find(nettest.Libp2pWorkers()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// modelOf writes a synthetic qwen3 once per test binary and returns its
// path and CID. seed tells apart models of the same shape with other
// weights.
func modelOf(t testing.TB, size, typ string, seed uint64) (path, cid string) {
	t.Helper()
	filesMu.Lock()
	defer filesMu.Unlock()
	key := fmt.Sprintf("qwen3-%s-%s-%d", size, typ, seed)
	p := filepath.Join(testDir, key+".gguf")
	if _, ok := files[key]; !ok {
		if err := engine.Synth(context.Background(), p, engine.SynthSpec{Arch: "qwen3", Size: size, Type: typ, Seed: seed}); err != nil {
			t.Fatal(err)
		}
		c, err := shards.FileCID(p)
		if err != nil {
			t.Fatal(err)
		}
		files[key], fileCIDs[p] = p, c.String()
	}
	return p, fileCIDs[p]
}

// sliceOf cuts layers [a,b) of the model file once per test binary.
func sliceOf(t testing.TB, full string, a, b int) string {
	t.Helper()
	filesMu.Lock()
	defer filesMu.Unlock()
	key := fmt.Sprintf("%s.%d-%d", filepath.Base(full), a, b)
	p := filepath.Join(testDir, key+".gguf")
	if _, ok := files[key]; !ok {
		if _, err := shards.Slice(full, p, a, b); err != nil {
			t.Fatal(err)
		}
		files[key] = p
	}
	return p
}

var testOpts = engine.Options{Threads: 2, Slots: 2, Context: 256}

// load loads a model file for the test's duration.
func load(t testing.TB, path string) *engine.Model {
	t.Helper()
	m, err := engine.Load(context.Background(), path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// link teaches a where b listens.
func link(a, b host.Host) { a.Peerstore().AddAddrs(b.ID(), b.Addrs(), time.Hour) }

// fileRef is a Reference over model files on disk: a file per layer
// range, loaded on first use (the way node's reference serves its own
// shards and the one-layer slices it fetched).
type fileRef struct {
	t     testing.TB
	model string
	files map[[2]int]string // [a,b) -> path

	mu     sync.Mutex
	loaded map[string]*engine.Model
	asked  []int
}

func newFileRef(t testing.TB, model string) *fileRef {
	return &fileRef{t: t, model: model, files: map[[2]int]string{}, loaded: map[string]*engine.Model{}}
}

// add offers the file holding layers [a,b).
func (r *fileRef) add(a, b int, path string) *fileRef {
	r.files[[2]int{a, b}] = path
	return r
}

func (r *fileRef) Layer(ctx context.Context, model string, l int) (*engine.Model, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, l)
	if model != r.model {
		return nil, fmt.Errorf("no copy of %s", model)
	}
	for rg, p := range r.files {
		if rg[0] <= l && l < rg[1] {
			if m := r.loaded[p]; m != nil {
				return m, nil
			}
			m, err := engine.Load(ctx, p, testOpts)
			if err != nil {
				return nil, err
			}
			r.t.Cleanup(func() { m.Close() })
			r.loaded[p] = m
			return m, nil
		}
	}
	return nil, fmt.Errorf("layer %d of %s is not held here", l, model)
}

// oneLayerRef is a reference made only of one-layer slices of full.
func oneLayerRef(t testing.TB, full, cid string, n int) *fileRef {
	r := newFileRef(t, cid)
	for l := 0; l < n; l++ {
		r.add(l, l+1, sliceOf(t, full, l, l+1))
	}
	return r
}

// servingPeer is a host answering challenges for one model file's layers
// [a,b) with a real Server.
func servingPeer(t testing.TB, path, cid string) (host.Host, *Server, *engine.Model) {
	t.Helper()
	h := newHost(t)
	m := load(t, path)
	srv := NewServer(h, func(model string, a, b int) *engine.Model {
		in := m.Info()
		if model == cid && in.LayerRange[0] <= a && b <= in.LayerRange[1] {
			return m
		}
		return nil
	}, nil)
	t.Cleanup(func() { srv.Close() })
	return h, srv, m
}

// newChecker checks from host h against ref.
func newChecker(h host.Host, ref Reference) *Checker {
	return &Checker{Host: h, Trust: swarm.NewTrust(), Ref: ref}
}
