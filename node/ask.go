package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/pipeline"
)

// ask answers spec for an API call or the mobile facade, adding what the API promises on top of
// every strategy: the text ends before the first stop string (and the
// generation is cancelled there), and a prompt that does not fit a model's
// context is the caller's error (400), not the swarm's.
func (n *Node) ask(ctx context.Context, spec querySpec) (out *outcome, err error) {
	stops := spec.stops
	start := time.Now()
	defer func() { n.metrics.answered(spec.mode, out, err, time.Since(start)) }()
	if len(stops) == 0 {
		out, err = n.answer(ctx, spec)
		return out, contextFull(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cut := newStopCutter(stops, spec.onToken, cancel)
	spec.onToken = cut.add
	// Stop strings cut the answer, not the reasoning before it: what was
	// written is kept for an answer that a stop string ended.
	var thought strings.Builder
	onReasoning := spec.onReasoning
	spec.onReasoning = func(t string) {
		thought.WriteString(t)
		if onReasoning != nil {
			onReasoning(t)
		}
	}
	out, err = n.answer(ctx, spec)
	if text, pieces, hit := cut.result(); hit {
		// The strategy saw a cancellation, perhaps as a failure: the answer
		// is what came before the stop string.
		stopped := &outcome{final: text, genToks: pieces, finish: "stop"}
		if out != nil {
			stopped.promptToks = out.promptToks
		}
		stopped.result = stoppedResult(spec, out, text, time.Since(start))
		if stopped.result.Reasoning == "" {
			stopped.result.Reasoning = thought.String()
		}
		return stopped, nil
	}
	if err != nil {
		return nil, contextFull(err)
	}
	cut.flush()
	if i, ok := engine.FirstStop(out.final, stops); ok { // a fallback answer not streamed as it was made
		out.final, out.finish = out.final[:i], "stop"
	}
	return out, nil
}

// stoppedResult is the query body of an answer a stop string ended: the
// strategy's, when the cancellation left it one, with the final answer cut
// before the stop string; else the answer alone.
func stoppedResult(spec querySpec, out *outcome, text string, took time.Duration) *answer.Result {
	if out != nil && out.result != nil {
		cp := *out.result
		cp.FinalAnswer = text
		return &cp
	}
	mode := spec.mode
	if mode == "" {
		mode = "auto"
	}
	return &answer.Result{Query: spec.prompt, Mode: mode, FinalAnswer: text, Stopped: true,
		TotalTimeMS: float64(took.Microseconds()) / 1000, AgentResponses: []answer.Agent{}}
}

// contextFull turns a prompt too long for the model into a 400.
func contextFull(err error) error {
	if err == nil {
		return nil
	}
	full := errors.Is(err, engine.ErrContextFull)
	var se *pipeline.StageError
	if errors.As(err, &se) && se.Code == pipeline.CodeContextFull {
		full = true
	}
	var nr *moa.NoResponseError
	if errors.As(err, &nr) && len(nr.Failed) > 0 {
		full = true
		for _, f := range nr.Failed {
			full = full && (errors.Is(f.Err, moa.ErrTooLong) || errors.Is(f.Err, engine.ErrContextFull))
		}
	}
	if !full {
		return err
	}
	return answer.Errorf(answer.ContextFull, "the prompt does not fit the model's context: %w", err)
}

// stopCutter passes streamed text on until the first stop string, which it
// and everything after it never reach the caller. Text that could be the
// start of a stop string is held back until the next piece decides
// (engine.Stopper).
type stopCutter struct {
	emit   func(string) // may be nil
	cancel func()

	mu     sync.Mutex
	st     engine.Stopper
	text   strings.Builder
	pieces int
}

func newStopCutter(stops []string, emit func(string), cancel func()) *stopCutter {
	return &stopCutter{emit: emit, cancel: cancel, st: engine.Stopper{Stops: stops}}
}

func (c *stopCutter) add(piece string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.Hit() {
		return
	}
	c.pieces++
	out, hit := c.st.Add(piece)
	c.out(out)
	if hit {
		c.cancel()
	}
}

// flush passes on what was held back: the generation ended without a stop.
func (c *stopCutter) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.st.Hit() {
		c.out(c.st.Flush(""))
	}
}

func (c *stopCutter) out(s string) {
	if s == "" {
		return
	}
	c.text.WriteString(s)
	if c.emit != nil {
		c.emit(s)
	}
}

// result is the text passed on, the pieces seen up to the stop, and
// whether a stop string ended it.
func (c *stopCutter) result() (string, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.text.String(), c.pieces, c.st.Hit()
}
