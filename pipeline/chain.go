package pipeline

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// chain is the originator's end of an open session: a stream to the first
// hop, through which every step travels.
type chain struct {
	st    stream
	r     *bufio.Reader
	open  Open
	first RouteHop
	pos   int
	// vocab checks every result: a token below it, or this many logits.
	// openChain sets the first hop's word; Generate sets the tokenizer's.
	vocab int
	conns []string // how this peer reached each hop when the chain opened (answer.HopStat.Conn)
	// sent is how many positions the route ran for this peer (every
	// step's, its results received); ack, once the chain is done with,
	// acknowledges that work to each hop (receipts.go).
	sent  int
	ack   func(*chain)
	acked bool
}

// openChain opens a session along route. If the first hop is this peer,
// its stage runs in-process.
func (o *Originator) openChain(ctx context.Context, open Open) (*chain, error) {
	first := open.Route[0]
	var st stream
	if first.Peer == o.Host.ID().String() {
		if o.Local == nil {
			return nil, &StageError{Peer: first.Peer, Layers: [2]int{first.Start, first.End}, Code: CodeNoShard,
				Err: errors.New("route starts on this peer, which serves no stages")}
		}
		a, b := net.Pipe()
		go o.Local.ServeLocal(b)
		st = pipeStream{a}
	} else {
		id, err := peer.Decode(first.Peer)
		if err != nil {
			return nil, err
		}
		ns, err := o.Host.NewStream(network.WithAllowLimitedConn(ctx, ProtocolID), id, ProtocolID)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &StageError{Peer: first.Peer, Layers: [2]int{first.Start, first.End}, Code: CodeDownstream, Err: err,
				Evidence: EvidenceStream}
		}
		st = ns
	}
	c := &chain{st: st, r: bufio.NewReaderSize(st, 64<<10), open: open, first: first, ack: o.ackChain}
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	if err := writeJSON(st, frameOpen, &open); err != nil {
		st.Reset()
		return nil, c.fail(ctx, err)
	}
	st.SetReadDeadline(time.Now().Add(60 * time.Second))
	typ, body, err := readFrame(c.r, limitJSON)
	if err != nil {
		st.Reset()
		return nil, c.fail(ctx, err)
	}
	switch typ {
	case frameOpened:
		var ok Opened
		if err := decodeJSON(body, &ok); err != nil || ok.Session != open.Session || ok.Vocab < 0 || ok.Vocab > maxVocab {
			st.Reset()
			return nil, c.fail(ctx, fmt.Errorf("bad opened frame: %v", err))
		}
		c.vocab = ok.Vocab
		return c, nil
	case frameError:
		st.Reset()
		return nil, c.remoteError(body)
	}
	st.Reset()
	return nil, c.fail(ctx, fmt.Errorf("unexpected frame type %d", typ))
}

// fail blames the first hop for a transport failure: this peer's own
// evidence (a deeper failure comes back as an error frame naming its hop,
// which is the first hop's word).
func (c *chain) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &StageError{Peer: c.first.Peer, Layers: [2]int{c.first.Start, c.first.End}, Code: CodeDownstream, Err: err,
		Evidence: EvidenceStream}
}

func (c *chain) remoteError(body []byte) error {
	var we WireError
	if err := decodeJSON(body, &we); err != nil {
		return &StageError{Peer: c.first.Peer, Layers: [2]int{c.first.Start, c.first.End}, Code: CodeInternal, Err: err}
	}
	p, layers := we.Peer, [2]int{we.Start, we.End}
	if p == "" {
		p, layers = c.first.Peer, [2]int{c.first.Start, c.first.End}
	}
	return &StageError{Peer: p, Layers: layers, Code: we.Code, Err: errors.New(we.Message)}
}

// step sends tokens (positions pos..pos+len-1), run in the given batches
// (nil: one), and waits for the result.
func (c *chain) step(ctx context.Context, tokens []int32, batches []int) (*Result, time.Duration, error) {
	return c.stepHidden(ctx, tokens, nil, batches)
}

// stepHidden is step with the hidden states of the positions as input: a
// probe's first hop past layer 0 takes them (as f32).
func (c *chain) stepHidden(ctx context.Context, tokens []int32, hidden []float32, batches []int) (*Result, time.Duration, error) {
	s := &Step{Session: c.open.Session, Pos: c.pos, Tokens: tokens, Batches: batches}
	if hidden != nil {
		s.DType, s.Hidden = dtF32, f32Bytes(hidden)
	}
	return c.send(ctx, s)
}

// verify sends tokens as a verify step: the result carries the token the
// route chose after each position (Result.Tokens).
func (c *chain) verify(ctx context.Context, tokens []int32, q []engine.Dist) (*Result, time.Duration, error) {
	return c.send(ctx, &Step{Session: c.open.Session, Pos: c.pos, Tokens: tokens, Verify: true, Drafts: q})
}

// rewind makes the next step start at position n, before the chain's
// end: every stage drops its positions from n on as that step arrives.
func (c *chain) rewind(n int) {
	if n >= 0 && n < c.pos {
		c.pos = n
	}
}

// send sends one step and waits for its result.
func (c *chain) send(ctx context.Context, s *Step) (*Result, time.Duration, error) {
	stop := context.AfterFunc(ctx, func() { c.st.Reset() })
	defer stop()
	t0 := time.Now()
	typ, body := encodeStepFrame(s)
	if err := writeFrame(c.st, typ, body); err != nil {
		return nil, 0, c.fail(ctx, err)
	}
	return c.await(ctx, t0, s, len(s.Tokens))
}

// stepParts sends tokens as parts of chunk positions, one behind the
// other, and the last of them as a step, and waits for its result: the
// prompt's. The parts are written while the result is awaited, so a stage
// that refuses a part and answers at once is heard at once.
func (c *chain) stepParts(ctx context.Context, tokens []int32, chunk int) (*Result, time.Duration, error) {
	stop := context.AfterFunc(ctx, func() { c.st.Reset() })
	defer stop()
	t0 := time.Now()
	last := (len(tokens) - 1) / chunk * chunk
	final := &Step{Session: c.open.Session, Pos: c.pos + last, Tokens: tokens[last:]}
	written := make(chan error, 1)
	go func() {
		for off := 0; off < last; off += chunk {
			s := &Step{Session: c.open.Session, Pos: c.pos + off, Tokens: tokens[off : off+chunk], Part: true}
			if err := writeFrame(c.st, framePart, encodeStep(s)); err != nil {
				written <- err
				return
			}
		}
		written <- writeFrame(c.st, frameStep, encodeStep(final))
	}()
	res, took, err := c.await(ctx, t0, final, len(tokens))
	if err != nil {
		select {
		case <-written:
		default:
			// Answered before every part was sent: the session is spent.
			c.st.Reset()
			<-written
		}
		return nil, took, err
	}
	if werr := <-written; werr != nil {
		return nil, took, c.fail(ctx, werr)
	}
	return res, took, nil
}

// await reads the result of step s, the last of n positions sent.
func (c *chain) await(ctx context.Context, t0 time.Time, s *Step, n int) (*Result, time.Duration, error) {
	tokens := s.Tokens
	c.st.SetReadDeadline(time.Now().Add(5 * time.Minute))
	typ, body, err := readFrame(c.r, resultLimit(&c.open, len(tokens)))
	took := time.Since(t0)
	if err != nil {
		return nil, took, c.fail(ctx, err)
	}
	switch typ {
	case frameResult:
		res, err := DecodeResult(body)
		if err != nil {
			return nil, took, c.fail(ctx, err)
		}
		// The first hop checked what it passes back (an honest one never
		// passes bad numbers on): a result that fails here proves it lied.
		if err := checkResult(res, &c.open, c.vocab, c.open.Session, len(tokens), s.Verify); err != nil {
			return nil, took, &StageError{Peer: c.first.Peer, Layers: [2]int{c.first.Start, c.first.End}, Code: CodeBadOutput,
				Err: fmt.Errorf("its result: %w", err), Evidence: EvidenceCheck}
		}
		c.pos += n
		c.sent += n
		return res, took, nil
	case frameError:
		return nil, took, c.remoteError(body)
	}
	return nil, took, c.fail(ctx, fmt.Errorf("unexpected frame type %d", typ))
}

// close ends the session: the stages close theirs in turn.
func (c *chain) close() {
	c.done()
	c.st.Close()
}

// reset ends the session at once (a hop failed, or the route is given up).
func (c *chain) reset() {
	c.done()
	c.st.Reset()
}

// done acknowledges the route's work, once.
func (c *chain) done() {
	if !c.acked && c.ack != nil && c.sent > 0 {
		c.ack(c)
	}
	c.acked = true
}

func f32Bytes(xs []float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, f := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}
