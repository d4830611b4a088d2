package swarm

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestReplayedRecordDoesNotResurrect: an adversary keeps a dead peer's
// real signed record and hands it, as a sample of the record exchange
// (the real wire format), to a peer that holds the dead peer dead, and to
// a newcomer that never saw it. Neither makes it alive: a sampled record
// is a lead, probed first, and the dead peer does not answer.
func TestReplayedRecordDoesNotResurrect(t *testing.T) {
	a := newMember(t, fastLive, nil)
	dead := newMember(t, fastLive, nil)
	link(t, a, dead)
	waitFor(t, 10*time.Second, "a sees the peer", func() bool { return a.s.View().Alive(dead.h.ID()) })
	p, _ := a.s.View().Get(dead.h.ID())
	old := p.sealed
	if old == nil {
		t.Fatal("a keeps no sealed record of the peer")
	}
	dead.stop()
	waitFor(t, 10*time.Second, "the peer dead", func() bool { return !a.s.View().Alive(dead.h.ID()) })

	// The adversary answers the record exchange with its own record and
	// the dead peer's.
	adv := sampler(t, old)
	newcomer := newMember(t, fastLive, nil)
	for _, m := range []*member{a, newcomer} {
		link(t, m, adv)
	}
	waitFor(t, 10*time.Second, "the adversary heard", func() bool {
		return a.s.View().Alive(adv.h.ID()) && newcomer.s.View().Alive(adv.h.ID())
	})
	for _, m := range []*member{a, newcomer} {
		if _, err := m.s.Fetch(t.Context(), adv.h.ID()); err != nil && !strings.Contains(err.Error(), "asked within") {
			t.Fatal(err)
		}
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if a.s.View().Alive(dead.h.ID()) || newcomer.s.View().Alive(dead.h.ID()) {
			t.Fatal("a replayed record made the dead peer alive")
		}
	}
}

// TestRecordExchangeBadInput: a request out of limits gets an answer that
// names the problem; an answer with someone else's record, or a stream
// that speaks garbage, is an error for the asker, never a row.
func TestRecordExchangeBadInput(t *testing.T) {
	a := newMember(t, fastLive, nil)
	b := newMember(t, fastLive, nil)
	link(t, a, b)
	waitFor(t, 10*time.Second, "a sees b", func() bool { return a.s.View().Alive(b.h.ID()) })
	askOnce := func(body string) recordsAnswer {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		st, err := a.h.NewStream(ctx, b.h.ID(), RecordsProtocol)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := recordFrames.Write(st, 0, []byte(body)); err != nil {
			t.Fatal(err)
		}
		var ans recordsAnswer
		_, raw, err := recordFrames.Read(st, maxAnswerBytes, nil)
		if err == nil {
			err = recordFrames.DecodeJSON(raw, &ans)
		}
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	// b answers one request per asker per serveGap, and a's own question
	// on connecting (it may be answered after a sees b, under load) is one.
	ask := func(body string) recordsAnswer {
		t.Helper()
		for range 5 {
			time.Sleep(serveGap)
			if ans := askOnce(body); !strings.Contains(ans.Error, "asked again within") {
				return ans
			}
		}
		t.Fatalf("%s: b refused every ask as too soon", body)
		return recordsAnswer{}
	}
	if ans := ask(`{"sample": 1000}`); !strings.Contains(ans.Error, "sample 1000 out of 0..64") {
		t.Fatalf("sample out of range answered %q", ans.Error)
	}
	if ans := ask(`{"sample": 1, "extra": true}`); !strings.Contains(ans.Error, "extra") {
		t.Fatalf("unknown field answered %q", ans.Error)
	}
	if ans := ask(`{"sample": 0, "self": "bm90IGEgcmVjb3Jk"}`); !strings.Contains(ans.Error, "the asker's record") {
		t.Fatalf("a broken record of the asker answered %q", ans.Error)
	}
	other, _ := b.s.sealedSelf()
	if ans := ask(`{"sample": 0, "self": "` + base64.StdEncoding.EncodeToString(other) + `"}`); !strings.Contains(ans.Error, "as its own") {
		t.Fatalf("another peer's record sent as the asker's answered %q", ans.Error)
	}
	if ans := ask(`{"sample": 0}`); ans.Error != "" || ans.Self == nil {
		t.Fatalf("a good request answered %+v", ans)
	}
	if ans := askOnce(`{"sample": 0}`); !strings.Contains(ans.Error, "asked again within") {
		t.Fatalf("a request within the serve gap answered %q", ans.Error)
	}

	// A liar answers with another peer's record.
	liar := newMember(t, fastLive, nil)
	liar.h.SetStreamHandler(RecordsProtocol, func(st network.Stream) {
		defer st.Close()
		recordFrames.Read(st, maxRequestBytes, nil)
		rec, _ := b.s.sealedSelf()
		recordFrames.WriteJSON(st, 0, recordsAnswer{Self: rec}, maxAnswerBytes)
	})
	c := newMember(t, fastLive, nil)
	link(t, c, liar)
	if _, err := c.s.xchg.fetch1(t.Context(), liar.h.ID()); err == nil || !strings.Contains(err.Error(), "answered with a record of "+b.h.ID().String()) {
		t.Fatalf("a record of another peer: err %v", err)
	}
	if c.s.View().Alive(b.h.ID()) {
		t.Fatal("a record the liar handed as its own made its peer alive")
	}
	// The same answer to a check of the liar's record (an idle probe).
	if err := c.s.xchg.check(t.Context(), liar.h.ID(), 1); err == nil || !strings.Contains(err.Error(), "answered with a record of "+b.h.ID().String()) {
		t.Fatalf("a record of another peer answering a check: err %v", err)
	}
	if c.s.View().Alive(b.h.ID()) {
		t.Fatal("a record the liar handed as its own, in a check, made its peer alive")
	}
	// A garbage answer.
	liar.h.SetStreamHandler(RecordsProtocol, func(st network.Stream) {
		defer st.Close()
		recordFrames.Read(st, maxRequestBytes, nil)
		recordFrames.Write(st, 0, []byte("not json"))
	})
	if _, err := c.s.xchg.fetch1(t.Context(), liar.h.ID()); err == nil || !strings.Contains(err.Error(), "answer of "+liar.h.ID().String()) {
		t.Fatalf("garbage: err %v", err)
	}
	if err := c.s.xchg.check(t.Context(), liar.h.ID(), 1); err == nil || !strings.Contains(err.Error(), "answer of "+liar.h.ID().String()) {
		t.Fatalf("garbage answering a check: err %v", err)
	}
}

// TestStaleLeadTakesCurrentRecord: a newcomer hears of a live peer only
// through an old record of it, handed on in a sample (the peer has since
// begun to serve a model; the change went out before the newcomer was
// there). The probe that makes the peer alive asks the peer itself, so the
// newcomer's table holds what the peer says now, not the lead; a peer
// that does not answer that question is not alive.
func TestStaleLeadTakesCurrentRecord(t *testing.T) {
	// x: a bare host that answers pings and, after its first two seconds
	// (a peer still starting), the record exchange with its current
	// record; it asks nobody anything, so only the newcomer's questions
	// can bring its record.
	x, k := bareHost(t)
	rec := gossip.Capability{PeerID: x.ID().String(), Seq: 1, TimeMS: time.Now().UnixMilli(), Addrs: []string{x.Addrs()[0].String()}}
	old, err := gossip.SealCapability(&rec, k)
	if err != nil {
		t.Fatal(err)
	}
	rec.Seq, rec.Shards = 2, []gossip.Shard{{ModelCID: "m", Start: 0, End: 8, Layers: 8}}
	current, err := gossip.SealCapability(&rec, k)
	if err != nil {
		t.Fatal(err)
	}
	answering := time.Now().Add(2 * time.Second)
	x.SetStreamHandler(RecordsProtocol, func(st network.Stream) {
		defer st.Close()
		if time.Now().Before(answering) {
			st.Reset()
			return
		}
		if _, _, err := recordFrames.Read(st, maxRequestBytes, nil); err == nil {
			recordFrames.WriteJSON(st, 0, recordsAnswer{Self: current}, maxAnswerBytes)
		}
	})

	adv := sampler(t, old)
	newcomer := newMember(t, fastLive, nil)
	link(t, newcomer, adv)
	took := waitFor(t, 10*time.Second, "the newcomer holds x alive", func() bool { return newcomer.s.View().Alive(x.ID()) })
	p, _ := newcomer.s.View().Get(x.ID())
	if p.Cap.Seq != 2 || len(p.Cap.Shards) != 1 {
		t.Fatalf("the newcomer holds x alive with record %d (shards %v): want x's own, 2", p.Cap.Seq, p.Cap.Shards)
	}
	t.Logf("x alive with its own record %v after the newcomer connected", took.Round(time.Millisecond))
}

// TestRecordCheck: a peer asked whether its record is newer than the one
// the asker holds answers without it when it is not, and with it when it
// is; the probe of a peer not in use is such a check, so a change whose
// record never reached this peer (here x published nothing) is in its
// table after the next probe, without records refreshed to the swarm.
func TestRecordCheck(t *testing.T) {
	a := newMember(t, fastLive, nil)
	b := newMember(t, fastLive, nil)
	link(t, a, b)
	waitFor(t, 10*time.Second, "a sees b", func() bool { return a.s.View().Alive(b.h.ID()) })
	// have gives the sequence number to ask with, b's current one or less.
	ask := func(have func(uint64) uint64) *recordsAnswer {
		t.Helper()
		for range 5 {
			time.Sleep(serveGap) // one answer per asker per serveGap
			seq := b.s.selfSeq()
			if seq == 0 {
				t.Fatal("b has sealed no record")
			}
			ans, err := a.s.xchg.ask(t.Context(), b.h.ID(), recordsRequest{Have: have(seq)})
			var refused *refusal
			if errors.As(err, &refused) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			return ans
		}
		t.Fatal("b refused every check as too soon")
		return nil
	}
	if ans := ask(func(seq uint64) uint64 { return seq }); ans.Self != nil || len(ans.Sample) > 0 {
		t.Fatalf("a check of b's current record answered with %d bytes of record and %d of sample", len(ans.Self), len(ans.Sample))
	}
	if ans := ask(func(seq uint64) uint64 { return seq - 1 }); ans.Self == nil {
		t.Fatal("a check of an older record of b answered without b's record")
	}

	// x: a bare host that serves the record exchange with its record of
	// the moment and publishes nothing.
	x, k := bareHost(t)
	type sealed struct {
		seq uint64
		b   []byte
	}
	var now atomic.Pointer[sealed]
	seal := func(seq uint64, shards []gossip.Shard) {
		rec := gossip.Capability{PeerID: x.ID().String(), Seq: seq, TimeMS: time.Now().UnixMilli(), Addrs: []string{x.Addrs()[0].String()}, Shards: shards}
		b, err := gossip.SealCapability(&rec, k)
		if err != nil {
			t.Fatal(err)
		}
		now.Store(&sealed{seq, b})
	}
	seal(1, nil)
	x.SetStreamHandler(RecordsProtocol, func(st network.Stream) {
		defer st.Close()
		_, body, err := recordFrames.Read(st, maxRequestBytes, nil)
		var req recordsRequest
		if err == nil && recordFrames.DecodeJSON(body, &req) == nil {
			ans := recordsAnswer{}
			if cur := now.Load(); req.Have < cur.seq {
				ans.Self = cur.b
			}
			recordFrames.WriteJSON(st, 0, ans, maxAnswerBytes)
		}
	})
	if err := a.h.Connect(t.Context(), peer.AddrInfo{ID: x.ID(), Addrs: x.Addrs()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a holds x alive", func() bool { return a.s.View().Alive(x.ID()) })
	// x changes at once (as a peer whose model loads just after it met a
	// newcomer): a checks a peer new in its table once, recheckAfter on.
	seal(2, []gossip.Shard{{ModelCID: "m", Start: 0, End: 8, Layers: 8}})
	took := waitFor(t, recheckAfter+5*time.Second, "a holds x's new record", func() bool { return len(a.s.View().HoldersOf("m")) == 1 })
	t.Logf("a's check of a peer new in its table took x's new record %v after the change", took.Round(time.Millisecond))
	// x changes again; its connection closes: a probes it at once, a
	// check of its record.
	seal(3, nil)
	a.h.Network().ClosePeer(x.ID())
	took = waitFor(t, 10*time.Second, "a holds x's third record", func() bool { return len(a.s.View().HoldersOf("m")) == 0 })
	if p, _ := a.s.View().Get(x.ID()); !p.Alive || p.Cap.Seq != 3 {
		t.Fatalf("after its check x is alive %v with record %d, want alive with 3", p.Alive, p.Cap.Seq)
	}
	t.Logf("the probe took x's third record %v after its connection closed", took.Round(time.Millisecond))
}

// sampler is a member that answers the record exchange with its own
// record and a sample of one record, sealed: an adversary, or a peer that
// holds an old record of another.
func sampler(t *testing.T, sealed []byte) *member {
	m := newMember(t, fastLive, nil)
	m.h.SetStreamHandler(RecordsProtocol, func(st network.Stream) {
		defer st.Close()
		if _, _, err := recordFrames.Read(st, maxRequestBytes, nil); err != nil {
			return
		}
		self, err := m.s.sealedSelf()
		if err != nil {
			return
		}
		recordFrames.WriteJSON(st, 0, recordsAnswer{Self: self, Sample: [][]byte{sealed}}, maxAnswerBytes)
	})
	return m
}

// bareHost is a libp2p host on loopback with no swarm service (it asks
// nobody anything), and its key.
func bareHost(t *testing.T) (host.Host, crypto.PrivKey) {
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(k), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, k
}
