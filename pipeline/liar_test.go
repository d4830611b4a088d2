package pipeline

import (
	"bufio"
	"context"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// liar is an adversary of the tests' own: a libp2p peer speaking the real
// stage protocol with the real frame types. It computes its layers with a
// real engine (its own stage, run in-process as a probe of its hop), opens
// the next hop itself, and lies as told, from its from-th step on (steps
// of every session counted, probes included).
type liar struct {
	*stagePeer
	hidden func(h []float32)           // corrupts the hidden states it passes on (or returns to a probe)
	result func(r *Result)             // corrupts the results it passes back
	blame  func(open *Open) *WireError // an error frame to send back instead of a step's result
	// acceptAll, on the last hop, answers every verify step by accepting
	// all its proposals (the token after the last is its honest one), and
	// every other step honestly: a liar in verify sessions only.
	acceptAll bool
	// old refuses opens with verify, as a stage that predates verify
	// steps does (its strict JSON knows no such field).
	old bool
	// realOnly lies on real sessions only: those whose route runs the
	// whole model over several hops, not a probe of one range. Its steps
	// are counted on those alone.
	realOnly bool
	from     int64
	steps    atomic.Int64
}

// realSession reports whether open looks like a real generation's session.
func realSession(open *Open) bool {
	return len(open.Route) > 1 && open.Route[0].Start == 0 && !open.probe()
}

// newLiar serves [a,b) of the model at full and lies; it claims to be
// fast, so that routes choose it.
func newLiar(t testing.TB, full, cid string, a, b int) *liar {
	t.Helper()
	l := &liar{stagePeer: newStagePeer(t)}
	l.serveFile(t, full, cid, a, b)
	l.srv.Local()[0].MsPerLayer = 0.01
	l.h.SetStreamHandler(ProtocolID, l.handle)
	return l
}

func (l *liar) handle(st network.Stream) {
	defer st.Close()
	r := newReader(st)
	typ, body, err := readFrame(r, limitJSON)
	var open Open
	if err != nil || typ != frameOpen || decodeJSON(body, &open) != nil || open.validate() != nil {
		st.Reset()
		return
	}
	if l.old && open.Verify {
		writeJSON(st, frameError, &WireError{Code: CodeBadFrame, Message: `json: unknown field "verify"`})
		return
	}
	hop := open.Route[open.Index]
	last := hop.End == open.end()
	// Its own layers, computed honestly by its own stage.
	inner := open
	inner.Route, inner.Index, inner.From, inner.Until = []RouteHop{hop}, 0, hop.Start, 0
	inner.Verify = false // its own stage runs verify steps as plain ones
	inner.Parts = false  // and a prompt's parts as plain steps
	if hop.End < open.Layers {
		inner.Until = hop.End
	}
	a, b := net.Pipe()
	go l.srv.ServeLocal(b)
	defer a.Close()
	ar := newReader(a)
	if writeJSON(a, frameOpen, &inner) != nil {
		return
	}
	if typ, body, err := readFrame(ar, limitJSON); err != nil || typ != frameOpened {
		if typ == frameError {
			writeFrame(st, frameError, body)
		}
		return
	}
	var down network.Stream
	var dr *bufio.Reader
	if !last {
		next := open.Route[open.Index+1]
		id, err := peer.Decode(next.Peer)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		down, err = l.h.NewStream(ctx, id, ProtocolID)
		cancel()
		if err != nil {
			writeJSON(st, frameError, &WireError{Code: CodeDownstream, Message: "unreachable", Peer: next.Peer, Start: next.Start, End: next.End})
			return
		}
		defer down.Close()
		dr = newReader(down)
		o := open
		o.Index++
		if writeJSON(down, frameOpen, &o) != nil {
			return
		}
		typ, body, err := readFrame(dr, limitJSON)
		if err != nil || typ != frameOpened {
			if typ == frameError {
				writeFrame(st, frameError, body)
			}
			return
		}
	}
	if writeJSON(st, frameOpened, &Opened{Session: open.Session, Vocab: l.srv.Local()[0].Model.Info().VocabSize}) != nil {
		return
	}
	for {
		typ, body, err := readFrame(r, limitStep(open.Hidden, 0))
		if err != nil {
			if down != nil {
				down.Reset()
			}
			return
		}
		lie := false
		if !l.realOnly || realSession(&open) {
			lie = l.steps.Add(1) > l.from
		}
		stp, err := DecodeStepFrame(typ, body, open.Hidden)
		if err != nil {
			return
		}
		if lie && l.blame != nil {
			if we := l.blame(&open); we != nil {
				writeJSON(st, frameError, we)
				return
			}
		}
		if typ == frameVerify || typ == framePart {
			// Its stage runs it as a plain step; the tokens after each
			// position are made up below (last hop) or come from the next.
			typ, body = encodeStepFrame(&Step{Session: stp.Session, Pos: stp.Pos, Tokens: stp.Tokens, DType: stp.DType, Hidden: stp.Hidden})
		}
		if writeFrame(a, typ, body) != nil {
			return
		}
		rt, rb, err := readFrame(ar, resultLimit(&inner, len(stp.Tokens)))
		if err != nil {
			return
		}
		if rt != frameResult {
			writeFrame(st, rt, rb)
			continue
		}
		res, err := DecodeResult(rb)
		if err != nil {
			return
		}
		if last && stp.Part {
			continue // more of the prompt follows: nothing to answer
		}
		if last {
			if stp.Verify {
				if !l.acceptAll {
					return // an honest verify needs every position's logits, which a probe does not give
				}
				res.Tokens = append(append([]int32(nil), stp.Tokens[1:]...), res.Token)
			}
			if lie && l.hidden != nil && open.probe() {
				l.hidden(res.Logits)
			}
			if lie && l.result != nil {
				l.result(res)
			}
			if writeFrame(st, frameResult, encodeResult(res)) != nil {
				return
			}
			continue
		}
		out := res.Logits
		if lie && l.hidden != nil {
			l.hidden(out)
		}
		next := &Step{Session: open.Session, Pos: stp.Pos, Tokens: stp.Tokens, DType: dtypeCode(open.DType), Batches: stp.Batches,
			Verify: stp.Verify, Drafts: stp.Drafts, Part: stp.Part}
		if next.DType == dtF32 {
			next.Hidden = f32Bytes(out)
		} else {
			next.Hidden = engine.F32ToF16Bytes(out)
		}
		ftyp, fbody := encodeStepFrame(next)
		if writeFrame(down, ftyp, fbody) != nil {
			return
		}
		if stp.Part {
			continue // passed on: the next hop answers the prompt's last step
		}
		dt, db, err := readFrame(dr, resultLimit(&open, len(stp.Tokens)))
		if err != nil {
			st.Reset()
			return
		}
		if dt == frameResult && lie && l.result != nil {
			if res, err := DecodeResult(db); err == nil {
				l.result(res)
				db = encodeResult(res)
			}
		}
		if writeFrame(st, dt, db) != nil {
			return
		}
	}
}

// Lies.
var (
	nanHidden   = func(h []float32) { h[len(h)/2] = float32(math.NaN()) }
	hugeHidden  = func(h []float32) { h[0] = 1e30 }
	wrongHidden = func(h []float32) { // finite, plausible, wrong
		for i := range h {
			h[i] = h[i]*1.05 + 0.02
		}
	}
	badResult = func(r *Result) {
		if len(r.Logits) > 0 {
			r.Logits[1] = float32(math.Inf(1))
		} else {
			r.Token = 1<<20 + 5
		}
	}
)

// assertBans checks who Trust banned: exactly the liars among peers.
