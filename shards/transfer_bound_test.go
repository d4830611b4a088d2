package shards

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// TestResumedMismatchBlamesNobody: a partial download left by an earlier
// attempt (perhaps another peer that announced the honest file's CID and
// sent junk) that an honest source completes does not hash right. The
// error is a CID mismatch, but not evidence against the honest source;
// the partial is dropped and the next fetch succeeds.
func TestResumedMismatchBlamesNobody(t *testing.T) {
	srv, cli, mc := twoPeers(t)
	ctx := testCtx(t)
	e, err := srv.st.EnsureSlice(mc, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(cli.st.Dir(), sliceName(mc, 1, 3))
	side, _ := json.Marshal(partialState{CID: e.CID, Size: e.Size})
	os.WriteFile(dst+".partial.json", side, 0o644)
	os.WriteFile(dst+".partial", make([]byte, e.Size/2), 0o644) // junk "from a liar"
	_, err = Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3)
	if !errors.Is(err, ErrCIDMismatch) || BadSource(err) {
		t.Fatalf("completing a poisoned prefix: %v (bad source %v), want a mismatch that blames nobody", err, BadSource(err))
	}
	if _, err := Fetch(ctx, cli.h, srv.h.ID(), cli.st, mc, 1, 3); err != nil {
		t.Fatalf("the fetch after: %v", err)
	}
}
