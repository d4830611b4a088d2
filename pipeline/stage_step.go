package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// run runs this stage's layers over the step's positions, in the given
// batches (nil: one). Hidden states of every position come back, or the
// last position's logits on the stage that runs the model's last layer.
func (ss *stageSession) run(tokens []int32, hidden []float32, batches []int) ([]float32, error) {
	if batches == nil {
		return ss.sess.RunRange(context.Background(), ss.hop.Start, ss.hop.End, tokens, hidden)
	}
	var out []float32
	H := ss.open.Hidden
	off := 0
	for _, n := range batches {
		var tk []int32
		var hd []float32
		if ss.hop.Start == 0 {
			tk = tokens[off : off+n]
		} else {
			hd = hidden[off*H : (off+n)*H]
		}
		res, err := ss.sess.RunRange(context.Background(), ss.hop.Start, ss.hop.End, tk, hd)
		if err != nil {
			return nil, err
		}
		if ss.head {
			out = res
		} else {
			out = append(out, res...)
		}
		off += n
	}
	return out, nil
}

// step runs one step on this stage and the rest of the chain. A part
// (Step.Part) runs here and is passed on: no result (nil, nil).
func (s *StageServer) step(ss *stageSession, typ byte, body []byte, self RouteHop) (*Result, *WireError) {
	ss.ran = false
	bad := func(f string, a ...any) *WireError {
		return &WireError{Code: CodeBadFrame, Message: fmt.Sprintf(f, a...), Peer: self.Peer, Start: self.Start, End: self.End}
	}
	st, err := DecodeStepFrame(typ, body, ss.open.Hidden)
	if err != nil {
		return nil, bad("%v", err)
	}
	if st.Session != ss.open.Session {
		return nil, bad("step for session %d on session %d", st.Session, ss.open.Session)
	}
	if st.Part && !ss.open.Parts {
		return nil, bad("a part on a session not opened for parts")
	}
	if st.Verify && !ss.open.Verify {
		return nil, bad("a verify step on a session not opened for verify steps")
	}
	if st.Verify && len(st.Tokens) > engine.MaxSpecK+1 {
		// The last hop holds the logits of every position at once.
		return nil, bad("a verify step of %d positions (at most %d)", len(st.Tokens), engine.MaxSpecK+1)
	}
	if err := checkDrafts(st, &ss.open, ss.vocab); err != nil {
		return nil, bad("%v", err)
	}
	if st.Pos > ss.sess.Pos() {
		return nil, bad("step at position %d, session is at %d", st.Pos, ss.sess.Pos())
	}
	want := dtypeCode(ss.open.DType)
	if ss.hop.Start == 0 {
		want = dtNone
	}
	if st.DType != want {
		return nil, bad("hidden state dtype %d, session uses %d", st.DType, want)
	}
	var hidden []float32
	var tokens []int32
	switch st.DType {
	case dtNone:
		tokens = st.Tokens
	case dtF16:
		if hidden, err = engine.F16BytesToF32(st.Hidden); err != nil {
			return nil, bad("%v", err)
		}
	case dtF32:
		hidden = make([]float32, len(st.Hidden)/4)
		for i := range hidden {
			hidden[i] = math.Float32frombits(binary.LittleEndian.Uint32(st.Hidden[4*i:]))
		}
	}
	if err := checkNumbers(hidden); err != nil {
		// Refused before it touches the KV cache: the session stays usable.
		from := "the hop before this one"
		if ss.open.Index == 0 {
			from = "the requester"
		}
		return nil, &WireError{Code: CodeBadInput, Message: fmt.Sprintf("hidden states from %s: %v (at most %g)", from, err, float64(MaxActivation)),
			Peer: ss.up.Peer, Start: ss.up.Start, End: ss.up.End}
	}
	if st.Pos < ss.sess.Pos() {
		// A rollback: the requester drops the positions from st.Pos on
		// (the rejected part of a speculative draft) and goes on there.
		if err := ss.sess.Truncate(st.Pos); err != nil {
			return nil, &WireError{Code: CodeInternal, Message: err.Error(), Peer: self.Peer, Start: self.Start, End: self.End}
		}
		ss.history = ss.history[:min(len(ss.history), st.Pos)]
	}
	t0 := time.Now()
	var out []float32
	if st.Verify && ss.last {
		out, err = ss.sess.RunRangeAll(context.Background(), ss.hop.Start, ss.hop.End, tokens, hidden)
	} else {
		out, err = ss.run(tokens, hidden, st.Batches)
	}
	compute := time.Since(t0)
	if err != nil {
		if errors.Is(err, engine.ErrContextFull) {
			return nil, &WireError{Code: CodeContextFull, Message: err.Error(), Peer: self.Peer, Start: self.Start, End: self.End}
		}
		if errors.Is(err, engine.ErrBadInput) {
			return nil, bad("%v", err)
		}
		return nil, &WireError{Code: CodeInternal, Message: err.Error(), Peer: self.Peer, Start: self.Start, End: self.End}
	}
	ss.ran = true
	ss.history = append(ss.history, st.Tokens...)
	me := HopTiming{ComputeMS: float32(compute.Microseconds()) / 1000}
	if ss.last && st.Part {
		return nil, nil // the prompt goes on: nothing to answer before its last step
	}
	if ss.last {
		res := &Result{Session: st.Session}
		if err := checkNumbers(out); err != nil {
			return nil, &WireError{Code: CodeInternal, Message: fmt.Sprintf("this hop's own output: %v", err), Peer: self.Peer, Start: self.Start, End: self.End}
		}
		switch {
		case ss.open.Logits || !ss.head:
			res.Logits = out
		case st.Verify:
			// The token after each position, as a step ending there would
			// have chosen it; sampling, each draft token is decided by the
			// speculative sampling rule (engine.Sampler.VerifyDraft).
			if res.Tokens, err = ss.sampler.VerifyDraft(out, len(out)/len(st.Tokens), ss.history, st.Tokens, st.Drafts); err != nil {
				return nil, &WireError{Code: CodeInternal, Message: err.Error(), Peer: self.Peer, Start: self.Start, End: self.End}
			}
			res.Token = res.Tokens[len(res.Tokens)-1]
		default:
			if res.Token, err = ss.sampler.Sample(out, ss.history); err != nil {
				return nil, &WireError{Code: CodeInternal, Message: err.Error(), Peer: self.Peer, Start: self.Start, End: self.End}
			}
		}
		// Sampling is this stage's compute too.
		me.ComputeMS = float32(time.Since(t0).Microseconds()) / 1000
		res.Hops = []HopTiming{me}
		return res, nil
	}
	next := &Step{Session: st.Session, Pos: st.Pos, Tokens: st.Tokens, DType: dtypeCode(ss.open.DType), Batches: st.Batches,
		Verify: st.Verify, Drafts: st.Drafts, Part: st.Part}
	if next.DType == dtF32 {
		next.Hidden = f32Bytes(out)
	} else {
		next.Hidden = engine.F32ToF16Bytes(out)
	}
	t1 := time.Now()
	ftyp, fbody := encodeStepFrame(next)
	if err := writeFrame(ss.down, ftyp, fbody); err != nil {
		return nil, s.writeFailed(ss, err)
	}
	if st.Part {
		return nil, nil // passed on: the next hop answers the prompt's last step
	}
	ss.down.SetReadDeadline(time.Now().Add(5 * time.Minute))
	typ, body, err = readFrame(ss.downR, resultLimit(&ss.open, len(st.Tokens)))
	if err != nil {
		return nil, downErr(ss, err)
	}
	switch typ {
	case frameResult:
		res, err := DecodeResult(body)
		if err != nil {
			return nil, downErr(ss, err)
		}
		// An honest hop passes back only results that pass the checks, so
		// bad numbers reaching the originator prove its first hop lied.
		if err := checkResult(res, &ss.open, ss.vocab, st.Session, len(st.Tokens), st.Verify); err != nil {
			return nil, &WireError{Code: CodeBadOutput, Message: "the next hop's result: " + err.Error(), Peer: ss.next.Peer,
				Start: ss.next.Start, End: ss.next.End}
		}
		me.DownstreamMS = float32(time.Since(t1).Microseconds()) / 1000
		res.Hops = append(res.Hops, me)
		return res, nil
	case frameError:
		return nil, nextError(ss, body)
	}
	return nil, downErr(ss, fmt.Errorf("unexpected frame type %d", typ))
}

// downErr is the next hop's failure: gone, or sending what it should not.
func downErr(ss *stageSession, err error) *WireError {
	return &WireError{Code: CodeDownstream, Message: err.Error(), Peer: ss.next.Peer, Start: ss.next.Start, End: ss.next.End}
}

// nextError is the error frame the next hop sent, passed on if the next
// hop may have written it.
func nextError(ss *stageSession, body []byte) *WireError {
	var we WireError
	if decodeJSON(body, &we) != nil {
		return downErr(ss, errors.New("malformed error frame"))
	}
	if we.Peer == "" {
		we.Peer, we.Start, we.End = ss.next.Peer, ss.next.Start, ss.next.End
	}
	if !ss.open.mayName(ss.open.Index, &we) {
		return blameNext(ss, &we)
	}
	if we.Code == CodeBadFrame && we.Peer == ss.next.Peer {
		// Our own frame was refused: that is our bug, not the next hop's death.
		we.Code = CodeInternal
	}
	return &we
}

// writeFailed is the error of a step that could not be written to the
// next hop: the error frame the next hop sent before it closed the session
// (a part it failed, answered at once), or else its loss.
func (s *StageServer) writeFailed(ss *stageSession, err error) *WireError {
	ss.down.SetReadDeadline(time.Now().Add(time.Second))
	if typ, body, rerr := readFrame(ss.downR, limitJSON); rerr == nil && typ == frameError {
		return nextError(ss, body)
	}
	return downErr(ss, err)
}
