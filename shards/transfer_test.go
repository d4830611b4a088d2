package shards

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newTestHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay(), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// peerNode is one test peer: a host, a store and a transfer server.
type peerNode struct {
	h   host.Host
	st  *Store
	srv *TransferServer
}

func newPeerNode(t *testing.T, opts ...TransferOption) *peerNode {
	t.Helper()
	n := &peerNode{h: newTestHost(t), st: openStore(t, t.TempDir())}
	srv, err := NewTransferServer(n.h, n.st, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	n.srv = srv
	t.Cleanup(func() { srv.Close() })
	return n
}

func connect(t *testing.T, a, b *peerNode) {
	t.Helper()
	if err := a.h.Connect(testCtx(t), peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// withOnDemandSlices lets the server cut up to n slices for peers (the
// product's servers cut 4).
func withOnDemandSlices(n int) TransferOption {
	return func(c *transferConfig) error { c.onDemand = n; return nil }
}

// twoPeers returns a server holding a fresh 4-layer model and a client.
func twoPeers(t *testing.T, opts ...TransferOption) (srv, cli *peerNode, model string) {
	t.Helper()
	srv, cli = newPeerNode(t, opts...), newPeerNode(t)
	path := filepath.Join(t.TempDir(), "model.gguf")
	writeTransferModel(t, path, 4, 11)
	m, err := srv.st.AddModel(path)
	if err != nil {
		t.Fatal(err)
	}
	connect(t, cli, srv)
	return srv, cli, m.CID
}

func TestFetchSlice(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	var mu sync.Mutex
	var last [2]int64
	e, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3, WithProgress(func(done, total int64) {
		mu.Lock()
		last = [2]int64{done, total}
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	served, ok := srv.st.Slice(mc, 1, 3)
	if !ok || !served.OnDemand {
		t.Fatalf("server did not cut the slice on demand: %+v", served)
	}
	if fc, _ := FileCID(e.Path); e.CID != served.CID || fc.String() != served.CID {
		t.Fatalf("fetched CID %s (file %s), server computed %s", e.CID, fc, served.CID)
	}
	mi, err := ReadModelInfo(e.Path)
	if err != nil || mi.LayerRange != [2]int{1, 3} || mi.Layers != 4 || e.Layers != 4 {
		t.Fatalf("fetched slice info %+v %v", mi, err)
	}
	mu.Lock()
	if last != [2]int64{e.Size, e.Size} {
		t.Errorf("last progress %v, want %d/%d", last, e.Size, e.Size)
	}
	mu.Unlock()
	if _, err := os.Stat(e.Path + ".partial"); !os.IsNotExist(err) {
		t.Error("partial file left behind")
	}

	// Held already: no second request.
	reqs := srv.srv.Stats().Requests
	if e2, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3); err != nil || e2 != e {
		t.Fatalf("second fetch: %+v %v", e2, err)
	}
	if srv.srv.Stats().Requests != reqs {
		t.Error("second fetch went to the network")
	}

	// The client serves onward, cutting a narrower slice from what it fetched.
	third := newPeerNode(t)
	connect(t, third, cli)
	e3, err := Fetch(ctx, third.h, cli.h.ID(), third.st, mc, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	want, err := srv.st.EnsureSlice(mc, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if e3.CID != want.CID {
		t.Errorf("narrower slice via a slice %s, from the model %s", e3.CID, want.CID)
	}

	// First and last stages, and the whole range.
	for _, r := range [][2]int{{0, 1}, {3, 4}, {0, 4}} {
		if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, r[0], r[1]); err != nil {
			t.Errorf("%v: %v", r, err)
		}
	}
}

func TestFetchResume(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	const cut = 40000
	if _, err := FetchManifest(ctx, cli.h, srv.h.ID(), cli.st, mc); err != nil {
		t.Fatal(err) // first: the break applies to the next body served
	}
	srv.srv.BreakAfterForTest.Store(cut)
	_, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 0, 3)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("broken transfer: %v", err)
	}
	partial := filepath.Join(cli.st.Dir(), mc+".0-3.gguf.partial")
	fi, err := os.Stat(partial)
	if err != nil || fi.Size() != cut {
		t.Fatalf("partial after the break: %v %v", fi, err)
	}
	if _, ok := cli.st.Slice(mc, 0, 3); ok {
		t.Fatal("interrupted slice recorded")
	}
	before := srv.srv.Stats().BytesSent
	var low int64 = -1 // progress counts the resumed prefix as done
	var mu sync.Mutex
	e, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 0, 3, WithProgress(func(done, total int64) {
		mu.Lock()
		if low < 0 || done < low {
			low = done
		}
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	if sent := srv.srv.Stats().BytesSent - before; sent != e.Size-cut {
		t.Errorf("resume sent %d bytes, want the remaining %d", sent, e.Size-cut)
	}
	mu.Lock()
	if low < cut {
		t.Errorf("progress reported %d bytes done, the partial had %d", low, cut)
	}
	mu.Unlock()
	if fc, _ := FileCID(e.Path); fc.String() != e.CID {
		t.Fatal("resumed file does not hash to its CID")
	}

	// A partial that is a prefix of some other file starts over.
	if err := cli.st.RemoveSlice(mc, 0, 3); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(partial, bytes.Repeat([]byte{7}, 1000), 0o644)
	os.WriteFile(partial+".json", []byte(`{"cid":"bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku","size":5000}`), 0o644)
	if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 0, 3); err != nil {
		t.Fatalf("restart over a foreign partial: %v", err)
	}
	// A partial longer than the file gets bad_offset, then starts over.
	if err := cli.st.RemoveSlice(mc, 0, 3); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(partial, make([]byte, e.Size+10), 0o644)
	os.WriteFile(partial+".json", []byte(`{"cid":"`+e.CID+`","size":1}`), 0o644)
	if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 0, 3); err != nil {
		t.Fatalf("restart over an overlong partial: %v", err)
	}
}

func TestFetchCorrupt(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	srv.srv.CorruptAtForTest.Store(5000)
	_, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3)
	if !errors.Is(err, ErrCIDMismatch) {
		t.Fatalf("corrupted transfer: %v", err)
	}
	dst := filepath.Join(cli.st.Dir(), mc+".1-3.gguf")
	for _, p := range []string{dst, dst + ".partial", dst + ".partial.json"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind", filepath.Base(p))
		}
	}
	if _, ok := cli.st.Slice(mc, 1, 3); ok {
		t.Fatal("corrupt slice recorded")
	}
	e, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3)
	if err != nil {
		t.Fatal(err)
	}

	// A caller that knows the CID refuses anything else before storing a byte.
	if err := cli.st.RemoveSlice(mc, 1, 3); err != nil {
		t.Fatal(err)
	}
	_, err = Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3, WithExpectedCID("bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"))
	if !errors.Is(err, ErrCIDMismatch) {
		t.Fatalf("unexpected CID: %v", err)
	}
	if _, err := os.Stat(dst + ".partial"); !os.IsNotExist(err) {
		t.Error("bytes of an unexpected file stored")
	}
	if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3, WithExpectedCID(e.CID)); err != nil {
		t.Fatal(err)
	}
}

// A server whose file for model X is really a slice of model Y: the bytes
// match the CID it announces, the provenance check catches the lie.
func TestFetchLyingServer(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	other := filepath.Join(t.TempDir(), "other.gguf")
	writeTransferModel(t, other, 4, 99)
	om, err := srv.st.AddModel(other)
	if err != nil {
		t.Fatal(err)
	}
	lie, err := srv.st.EnsureSlice(om.CID, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	lie.Model = mc
	srv.st.mu.Lock()
	srv.st.slices[sliceName(mc, 1, 3)] = lie
	srv.st.mu.Unlock()
	_, err = Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("slice of another model accepted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cli.st.Dir(), sliceName(mc, 1, 3)+".partial")); !os.IsNotExist(err) {
		t.Error("rejected partial left behind")
	}
}

func TestFetchErrors(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	unknown := writeTransferModel(t, filepath.Join(t.TempDir(), "u.gguf"), 2, 5)
	_, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, unknown, 0, 1)
	var te *TransferError
	if !errors.Is(err, ErrUnknownModel) || !errors.As(err, &te) || te.Code != CodeUnknownModel || te.Peer != srv.h.ID() {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 2, 9); !errors.Is(err, ErrLayerRange) {
		t.Errorf("bad range: %v", err)
	}

	// A peer holding only layers [0,2).
	part := newPeerNode(t)
	wide, err := srv.st.EnsureSlice(mc, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := part.st.ImportSlice(wide.Path, mc); err != nil {
		t.Fatal(err)
	}
	connect(t, cli, part)
	if _, err := Fetch(ctx, cli.h, part.h.ID(), cli.st, mc, 1, 3); !errors.Is(err, ErrLayersNotHeld) {
		t.Errorf("layers not held: %v", err)
	}
	if _, err := Fetch(ctx, cli.h, part.h.ID(), cli.st, mc, 1, 2); err != nil {
		t.Errorf("narrower than held: %v", err)
	}
	if _, err := FetchModel(ctx, cli.h, part.h.ID(), cli.st, mc); !errors.Is(err, ErrLayersNotHeld) {
		t.Errorf("full model from a slice holder: %v", err)
	}

	// Raw requests: offset past the end, garbage.
	cfg, _ := newFetchConfig(nil, 1<<20)
	_, _, err = request(ctx, cli.h, srv.h.ID(), transferRequest{Op: OpSlice, Model: mc, From: 0, To: 2, Offset: 1 << 40}, cfg)
	if !errors.Is(err, ErrBadOffset) {
		t.Errorf("offset past end: %v", err)
	}
	s, err := cli.h.NewStream(ctx, srv.h.ID(), TransferProtocol)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{5, '{', '"', 'o', 'p', 0})
	var resp transferResponse
	if err := readFrame(s, &resp); err != nil || resp.Code != CodeBadRequest {
		t.Errorf("garbage request: %+v %v", resp, err)
	}
	s.Close()

	// A server that cuts nothing for peers.
	strict, _, _ := twoPeers(t, withOnDemandSlices(0))
	connect(t, cli, strict)
	m, _ := strict.st.List()
	if _, err := Fetch(ctx, cli.h, strict.h.ID(), cli.st, m[0].CID, 0, 1); !errors.Is(err, ErrLayersNotHeld) {
		t.Errorf("on-demand disabled: %v", err)
	}

	// Closed server: the protocol is gone.
	srv.srv.Close()
	srv.srv.Close()
	if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 0, 3); err == nil {
		t.Error("fetch from a closed server worked")
	}
}

func TestFetchHeaderAndModel(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	p, err := FetchHeader(ctx, cli.h, srv.h.ID(), cli.st, mc)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ReadGGUFFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tensors) != 0 || g.ArrayLen("tokenizer.ggml.tokens") != 5 || g.String("tokenizer.chat_template") == "" ||
		g.String("tokenizer.ggml.model") != "gpt2" || g.String(SourceCIDKey) != mc || g.Uint("llama.block_count") != 4 {
		t.Fatalf("header: %d tensors, keys %v", len(g.Tensors), g.KVs)
	}
	if h, ok := cli.st.Header(mc); !ok || h.Path != p {
		t.Fatalf("header not recorded: %+v", h)
	}

	m, err := FetchModel(ctx, cli.h, srv.h.ID(), cli.st, mc)
	if err != nil {
		t.Fatal(err)
	}
	if m.CID != mc || m.Layers != 4 {
		t.Fatalf("model entry %+v", m)
	}
	if fc, _ := FileCID(m.Path); fc.String() != m.FileCID {
		t.Fatal("fetched model does not hash to its CID")
	}
}

func TestOnDemandEviction(t *testing.T) {
	srv, cli, mc := twoPeers(t, withOnDemandSlices(1))
	ctx := testCtx(t)
	own, err := srv.st.EnsureSlice(mc, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{1, 2}, {2, 3}, {0, 1}} {
		if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	_, ss := srv.st.List()
	var ranges [][2]int
	for _, e := range ss {
		ranges = append(ranges, [2]int{e.From, e.To})
	}
	if len(ss) != 2 {
		t.Fatalf("server keeps %v, want its own [0,1) and the newest on-demand [2,3)", ranges)
	}
	if _, err := os.Stat(own.Path); err != nil {
		t.Error("evicted a slice the node keeps for itself")
	}
	if _, ok := srv.st.Slice(mc, 1, 2); ok {
		t.Error("oldest on-demand slice not evicted")
	}
}

func FuzzDecodeTransferRequest(f *testing.F) {
	frame := func(s string) []byte { return append(binary.AppendUvarint(nil, uint64(len(s))), s...) }
	mc := "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
	f.Add(frame(`{"op":"slice","model":"` + mc + `","from":1,"to":3,"offset":100}`))
	f.Add(frame(`{"op":"header","model":"` + mc + `"}`))
	f.Add(frame(`{"op":"model","model":"` + mc + `","offset":-1}`))
	f.Add(frame(`{"op":"slice","model":"../../etc/passwd","from":0,"to":1}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeTransferRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		if _, err := ParseCID(req.Model); err != nil || req.Offset < 0 {
			t.Fatalf("accepted %+v", req)
		}
		if req.Op == OpSlice && (req.From < 0 || req.To <= req.From || req.To > maxLayers) {
			t.Fatalf("accepted range %+v", req)
		}
		var buf bytes.Buffer
		if err := writeFrame(&buf, req); err != nil {
			t.Fatal(err)
		}
		again, err := decodeTransferRequest(&buf)
		if err != nil || again != req {
			t.Fatalf("round trip %+v -> %+v %v", req, again, err)
		}
	})
}

func FuzzDecodeTransferResponse(f *testing.F) {
	frame := func(s string) []byte { return append(binary.AppendUvarint(nil, uint64(len(s))), s...) }
	f.Add(frame(`{"cid":"bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku","size":10,"offset":4,"layers":4}`))
	f.Add(frame(`{"code":"not_held","error":"x"}`))
	f.Add(frame(`{"cid":"x","size":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req := transferRequest{Offset: 4}
		resp, err := decodeTransferResponse(bytes.NewReader(b), req)
		if err != nil || resp.Code != "" {
			return
		}
		if resp.Size < 0 || resp.Offset != req.Offset || resp.Offset > resp.Size {
			t.Fatalf("accepted %+v", resp)
		}
	})
}

// A peer serving a poisoned slice, header or manifest for a model named by
// its root: the bytes match the CIDs it announces, the manifest catches
// the lie, and nothing is stored.
func TestFetchPoisoned(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	good, err := srv.st.EnsureSlice(mc, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Poison one weight of the served slice and re-register it, so the
	// file the server announces hashes right.
	poison(t, good.Path, good.Path, func(g *GGUF, d [][]byte) { d[1][3] ^= 0x40 })
	fc, _ := FileCID(good.Path)
	fi, _ := os.Stat(good.Path)
	good.CID, good.Size = fc.String(), fi.Size()
	srv.st.putSlice(good)
	_, err = Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "data hashes to") {
		t.Fatalf("poisoned slice: %v", err)
	}
	if _, ok := cli.st.Slice(mc, 1, 3); ok {
		t.Fatal("poisoned slice stored")
	}
	if _, err := os.Stat(filepath.Join(cli.st.Dir(), sliceName(mc, 1, 3)+".partial")); !os.IsNotExist(err) {
		t.Error("rejected partial left behind")
	}

	// An altered tokenizer in the header.
	h, err := srv.st.EnsureHeader(mc)
	if err != nil {
		t.Fatal(err)
	}
	poison(t, h.Path, h.Path, func(g *GGUF, d [][]byte) {
		for i, kv := range g.KVs {
			if kv.Key == "tokenizer.chat_template" {
				g.KVs[i].Value = "{{ 'attacker text' }}"
			}
		}
	})
	hc, _ := FileCID(h.Path)
	hi, _ := os.Stat(h.Path)
	srv.st.mu.Lock()
	srv.st.headers[mc] = HeaderEntry{Model: mc, CID: hc.String(), Size: hi.Size(), Path: h.Path}
	srv.st.mu.Unlock()
	if _, err := FetchHeader(ctx, cli.h, srv.h.ID(), cli.st, mc); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "metadata") {
		t.Fatalf("poisoned header: %v", err)
	}
	if _, ok := cli.st.Header(mc); ok {
		t.Fatal("poisoned header stored")
	}

	// A peer that answers a manifest request with another model's
	// manifest, announcing the root's digest or the bytes' own.
	other := writeTransferModel(t, filepath.Join(t.TempDir(), "o.gguf"), 4, 77)
	oc, _ := ParseModelCID(other)
	_, ob, _ := srv.st.Manifest(mc)
	for _, announce := range []string{rawOf(oc), rawOf(ManifestCID(ob))} {
		liar := newPeerNode(t)
		liar.h.SetStreamHandler(TransferProtocol, func(s network.Stream) {
			defer s.Close()
			if _, err := decodeTransferRequest(s); err != nil {
				return
			}
			writeFrame(s, transferResponse{CID: announce, Size: int64(len(ob))})
			s.Write(ob)
		})
		connect(t, cli, liar)
		if _, err := FetchManifest(ctx, cli.h, liar.h.ID(), cli.st, other); !errors.Is(err, ErrCIDMismatch) {
			t.Fatalf("a manifest that does not hash to its root (announced %s): %v", announce, err)
		}
		if _, _, ok := cli.st.Manifest(other); ok {
			t.Fatal("a wrong manifest stored")
		}
	}

	// Importing a poisoned file is refused the same way.
	if _, err := cli.st.ImportSlice(good.Path, mc); !errors.Is(err, ErrMismatch) {
		t.Fatalf("import of a poisoned slice: %v", err)
	}
}
