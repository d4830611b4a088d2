package shards

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestFetchBoundedByManifest: what one source can make a fetcher download
// for a slice or a header is bounded by the model's manifest (about the
// honest file's size), not by a generous constant: every honest slice and
// the header fit their bound; a slice padded with 4 MiB of junk metadata
// is refused when announced, before a byte of its body is read.
func TestFetchBoundedByManifest(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	m, _, ok := srv.st.Manifest(mc)
	if !ok {
		t.Fatal("no manifest")
	}
	for a := 0; a < m.Layers; a++ {
		for b := a + 1; b <= m.Layers; b++ {
			e, err := srv.st.EnsureSlice(mc, a, b)
			if err != nil {
				t.Fatal(err)
			}
			if bound := m.sliceBound(a, b); e.Size > bound || bound > e.Size+2*boundSlack+int64(len(m.Encode())) {
				t.Errorf("slice [%d,%d): %d bytes, bound %d", a, b, e.Size, bound)
			}
		}
	}
	h, err := srv.st.EnsureHeader(mc)
	if err != nil {
		t.Fatal(err)
	}
	if h.Size > m.headerBound() {
		t.Errorf("header: %d bytes, bound %d", h.Size, m.headerBound())
	}
	if _, err := FetchHeader(ctx, cli.h, srv.h.ID(), cli.st, mc); err != nil {
		t.Fatal(err)
	}

	good, _ := srv.st.Slice(mc, 1, 3)
	old := int64(96 << 20) // the bound before: the tensors and 96 MiB of metadata
	for _, e := range m.expected(1, 3) {
		old += int64(e.Size) + 64
	}
	t.Logf("figures: slice [1,3) is %d bytes; one source may send at most %d for it (%d before)", good.Size, m.sliceBound(1, 3), old)
	poison(t, good.Path, good.Path, func(g *GGUF, _ [][]byte) {
		g.KVs = append(g.KVs, KV{Key: "general.padding", Type: TypeString, Value: strings.Repeat("x", 4<<20)})
	})
	fc, _ := FileCID(good.Path)
	fi, _ := os.Stat(good.Path)
	good.CID, good.Size = fc.String(), fi.Size()
	srv.st.putSlice(good)
	before := srv.srv.Stats().BytesSent
	_, err = Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3)
	if !errors.Is(err, ErrTooLarge) || !BadSource(err) {
		t.Fatalf("a padded slice: %v, want ErrTooLarge", err)
	}
	if sent := srv.srv.Stats().BytesSent - before; sent != 0 {
		t.Fatalf("%d bytes of the padded slice were read", sent)
	}
}

// TestResumedMismatchBlamesPrefix: a peer announcing an honest file's CID
// sends junk and drops the stream, leaving a partial download that an
// honest source then completes. The whole file does not hash right; the
// fetch gets it whole again from the honest source, succeeds, and blames
// the peer that sent the prefix, never the honest one.
func TestResumedMismatchBlamesPrefix(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	e, err := srv.st.EnsureSlice(mc, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	liar := newTestHost(t).ID()
	for _, from := range []string{liar.String(), srv.h.ID().String(), ""} {
		dst := filepath.Join(cli.st.Dir(), sliceName(mc, 1, 3))
		side, _ := json.Marshal(partialState{CID: e.CID, Size: e.Size, Peer: from})
		os.WriteFile(dst+".partial.json", side, 0o644)
		os.WriteFile(dst+".partial", make([]byte, e.Size/2), 0o644) // junk "from the liar"
		var blamed []peer.ID
		got, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3, WithBlame(func(p peer.ID, err error) {
			if !BadSource(err) {
				t.Errorf("blame %v is not a bad source's error", err)
			}
			blamed = append(blamed, p)
		}))
		if err != nil || got.CID != e.CID {
			t.Fatalf("prefix from %q: %+v, %v; want the honest slice", from, got, err)
		}
		if want := from == liar.String(); want != (len(blamed) == 1 && blamed[0] == liar) || (!want && len(blamed) > 0) {
			t.Fatalf("prefix from %q: blamed %v", from, blamed)
		}
		cli.st.RemoveSlice(mc, 1, 3)
	}
}
