package verify

import (
	"bufio"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/swarm"
)

// ask sends one raw request and returns the type of the answer's first
// frame and, for an error frame, its code.
func ask(t *testing.T, from host.Host, to peer.ID, req *Request) (byte, string) {
	t.Helper()
	st, err := from.NewStream(t.Context(), to, ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := WriteRequest(st, req); err != nil {
		t.Fatal(err)
	}
	typ, body, err := readFrame(bufio.NewReader(st), limitBoundary)
	if err != nil {
		t.Fatal(err)
	}
	if typ != frameError {
		return typ, ""
	}
	return typ, refusal(t, typ, body)
}

func refusal(t *testing.T, typ byte, body []byte) string {
	t.Helper()
	if typ != frameError {
		t.Fatalf("frame type %d, want an error frame", typ)
	}
	we, err := decodeError(body)
	if err != nil {
		t.Fatal(err)
	}
	return we.Code
}

// TestServerRefusals: requests the server cannot answer get a clear error
// frame: layers not held, another model, a hidden size not the model's,
// token ids outside the vocabulary, garbage, and a peer over its rate.
func TestServerRefusals(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	ph, srv, _ := servingPeer(t, sliceOf(t, full, 1, 3), cid)
	srv.Burst, srv.Every = 4, time.Hour
	h := newHost(t)
	link(h, ph)
	hidden := make([]float32, 2*64)
	for name, tc := range map[string]struct {
		req  *Request
		code string
	}{
		"not held":       {&Request{Model: cid, Start: 0, End: 2, Tokens: []int32{1}}, CodeNotHeld},
		"other model":    {&Request{Model: "bafkreiother", Start: 1, End: 2, Hidden: hidden, HiddenSize: 64}, CodeNotHeld},
		"wrong hidden":   {&Request{Model: cid, Start: 1, End: 2, Hidden: hidden, HiddenSize: 32}, CodeBadRequest},
		"beyond a slice": {&Request{Model: cid, Start: 2, End: 4, Hidden: hidden, HiddenSize: 64}, CodeNotHeld},
	} {
		t.Run(name, func(t *testing.T) {
			if _, code := ask(t, h, ph.ID(), tc.req); code != tc.code {
				t.Fatalf("code %s, want %s", code, tc.code)
			}
		})
	}
	// Garbage instead of a request (from another peer: the rate limit
	// comes before reading, and this one has used its burst).
	hg := newHost(t)
	link(hg, ph)
	st, err := hg.NewStream(t.Context(), ph.ID(), ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte{5, 1, 0, 0, 0, 0})
	typ, body, err := readFrame(bufio.NewReader(st), limitBoundary)
	st.Close()
	if err != nil || refusal(t, typ, body) != CodeBadRequest {
		t.Fatalf("garbage: %v", err)
	}
	// Every request above took a token from the asking peer's bucket: it
	// is over its burst of 4 now, whatever it asks.
	if _, code := ask(t, h, ph.ID(), &Request{Model: cid, Start: 1, End: 2, Hidden: hidden, HiddenSize: 64}); code != CodeRateLimited {
		t.Fatalf("over the rate: %s", code)
	}
	// Another peer is not affected.
	h2 := newHost(t)
	link(h2, ph)
	if typ, _ := ask(t, h2, ph.ID(), &Request{Model: cid, Start: 1, End: 2, Hidden: hidden, HiddenSize: 64}); typ != frameBoundary {
		t.Fatalf("another peer: frame type %d", typ)
	}
}

// TestRefusalIsNotFailure: a peer that is busy or rate-limits this peer is
// not banned (its claim is not disproved), but Vet leaves it out, and does
// not challenge it again for Retry.
func TestRefusalIsNotFailure(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	for _, code := range []string{CodeBusy, CodeRateLimited, CodeInternal} {
		lr := newLiar(t, full)
		lr.refuse = code
		lr.why = strings.Repeat("a long reason ", 250) // longer than a tiny model's layer output
		h := newHost(t)
		link(h, lr.h)
		c := newChecker(h, newFileRef(t, cid).add(0, 4, full))
		claim := swarm.Claim{Model: cid, Start: 0, End: 4}
		err := c.Vet(t.Context(), lr.h.ID(), claim)
		var we *WireError
		if !errors.As(err, &we) || we.Code != code {
			t.Fatalf("%s: vet %v", code, err)
		}
		if banned, _ := c.Trust.Banned(lr.h.ID()); banned {
			t.Fatalf("%s: banned for a refusal", code)
		}
		if err2 := c.Vet(t.Context(), lr.h.ID(), claim); err2 == nil || lr.challenges() != 1 {
			t.Fatalf("%s: second vet %v after %d challenges: want the remembered refusal", code, err2, lr.challenges())
		}
	}
}

// TestUnverifiedWithoutReference: with no copy of the layers here, the
// claim stays unverified: Vet lets the peer through, nothing is sent to
// it, and it is neither banned nor verified.
func TestUnverifiedWithoutReference(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	lr := newLiar(t, full)
	h := newHost(t)
	link(h, lr.h)
	ref := newFileRef(t, cid).add(2, 4, full) // layers 2-3 only
	c := newChecker(h, ref)
	claim := swarm.Claim{Model: cid, Start: 0, End: 4}
	if _, err := c.Check(t.Context(), lr.h.ID(), claim); !errors.Is(err, ErrNoReference) {
		t.Fatalf("check: %v, want ErrNoReference", err)
	}
	if err := c.Vet(t.Context(), lr.h.ID(), claim); err != nil {
		t.Fatalf("vet: %v, want nil (unverified)", err)
	}
	if banned, _ := c.Trust.Banned(lr.h.ID()); banned || c.Trust.Verified(lr.h.ID(), claim) || lr.challenges() != 0 {
		t.Fatalf("unverifiable claim: banned %v, verified %v, %d challenges sent", banned,
			c.Trust.Verified(lr.h.ID(), claim), lr.challenges())
	}
	// The missing layer is remembered: not looked up again at once.
	if n := len(ref.asked); n != 1 {
		t.Fatalf("reference asked %d times, want 1", n)
	}
	// A checker with no reference at all.
	c2 := newChecker(h, nil)
	if err := c2.Vet(t.Context(), lr.h.ID(), swarm.RoleClaim(cid)); err != nil {
		t.Fatal(err)
	}
}

// TestVetSharesOneChallenge: many routes vetting the same peer at once
// send it one challenge, and once passed the ledger answers.
func TestVetSharesOneChallenge(t *testing.T) {
	full, cid := modelOf(t, "tiny", "f32", 1)
	lr := newLiar(t, full) // honest: no tamper
	h := newHost(t)
	link(h, lr.h)
	c := newChecker(h, newFileRef(t, cid).add(0, 4, full))
	claim := swarm.Claim{Model: cid, Start: 1, End: 3}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Vet(context.Background(), lr.h.ID(), claim)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Vet(t.Context(), lr.h.ID(), swarm.Claim{Model: cid, Start: 1, End: 2}); err != nil {
		t.Fatal(err)
	}
	if n := lr.challenges(); n != 1 {
		t.Fatalf("%d challenges for one claim, want 1", n)
	}
}
