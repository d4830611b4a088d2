package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Request is one whole-model generation.
type Request struct {
	// Messages are rendered with the model's chat template. If empty, Prompt
	// is used as raw text (BOS added if the model wants it).
	Messages []Message `json:"messages,omitempty"`
	Prompt   string    `json:"prompt,omitempty"`
	// Think switches Qwen3 thinking (nil: template default, on).
	Think    *bool          `json:"think,omitempty"`
	Sampling SamplerOptions `json:"sampling"`
	// MaxTokens caps generated tokens (0: until end of generation or the
	// session's context is full).
	MaxTokens int `json:"max_tokens,omitempty"`
	// Stop strings end generation; the text returned stops before them.
	Stop []string `json:"stop,omitempty"`
	// Draft, when set, drafts the answer: each step after the first is a
	// speculative round (SpecRound) verifying its proposals, k chosen by
	// cost (NewSpecCost). The draft must be empty (Pos 0); it is not
	// closed here. A draft that fails is dropped (Result.DraftError) and
	// the answer goes on plainly: greedy, the same answer either way;
	// sampling, one of the same distribution (see spec.go).
	Draft SpecModel `json:"-"`
	// OpenDraft, when set (and Draft is not), opens the draft once the
	// generation has its session, beside the prompt's run: the draft then
	// runs the prompt too, and drafting starts at the first round after
	// that, without the answer ever waiting for it. The function it
	// returns closes the draft.
	OpenDraft func(ctx context.Context) (SpecModel, func(), error) `json:"-"`
	// DraftMin and DraftMax bound the draft length chosen by cost
	// (NewSpecCost): 0 and 8 by default.
	DraftMin, DraftMax int `json:"-"`
}

// Token is one generated token as streamed. Text is the new visible text (it
// may be empty: control tokens, incomplete UTF-8, text held back because it
// may begin a stop string). Reasoning is the new text of the model's
// reasoning, apart from the answer (a chat answer in the harmony format,
// GPT-OSS: its analysis channel); stop strings do not cut it.
type Token struct {
	ID        int32
	Text      string
	Reasoning string
}

// DoneReason says why generation ended.
type DoneReason string

const (
	DoneStop   DoneReason = "stop"   // end-of-generation token or stop string
	DoneLength DoneReason = "length" // MaxTokens or context full
	DoneCancel DoneReason = "cancel" // ctx done
)

// Metrics of one generation.
type Metrics struct {
	PromptTokens    int
	GeneratedTokens int
	// TTFT is from the call to the first generated token.
	TTFT time.Duration
	// Prefill is the prompt's forward pass; Decode the passes after it.
	Prefill, Decode time.Duration
	// PrefillTPS is prompt tokens per second; DecodeTPS decode passes per
	// second (the first token comes from the prefill pass).
	PrefillTPS, DecodeTPS float64
}

// Result of Generate.
type Result struct {
	Text string
	// Reasoning is the model's reasoning, apart from Text: the whole of
	// Token.Reasoning ("" for raw completion and for formats without).
	Reasoning string
	// Tokens are the generated ids, including a final end-of-generation token.
	Tokens  []int32
	Done    DoneReason
	Metrics Metrics
	// With a draft: tokens proposed, of them accepted, verify steps, and
	// why drafting stopped early ("": it did not).
	Drafted, DraftAccepted, DraftRounds int
	DraftError                          string
}

// Generate runs a whole-model generation in a new session (waiting for a
// free slot as AcquireSession does; ErrQueueFull when too many wait), calling onToken (if not nil) for each generated token as it
// is produced. If ctx ends, it returns what was generated with Done ==
// DoneCancel and ctx's error. An error from onToken stops generation and is
// returned.
func (m *Model) Generate(ctx context.Context, req Request, onToken func(Token) error) (Result, error) {
	start := time.Now()
	var res Result
	if m.info.LayerRange != [2]int{0, m.info.Layers} || !m.info.HasEmbedding || !m.info.HasHead {
		return res, &FileError{m.path, fmt.Errorf("%w: generation needs the whole model, file holds layers [%d,%d)", ErrMissingLayers, m.info.LayerRange[0], m.info.LayerRange[1])}
	}
	var prompt []int32
	var err error
	if len(req.Messages) > 0 {
		prompt, err = m.tok.EncodeChat(req.Messages, ChatOptions{Think: req.Think})
	} else {
		prompt, err = m.tok.Encode(req.Prompt, true)
	}
	if err != nil {
		return res, err
	}
	if len(prompt) == 0 {
		return res, fmt.Errorf("%w: empty prompt", ErrBadInput)
	}
	if len(prompt) >= m.opts.Context {
		return res, &ContextError{Prompt: len(prompt), Context: m.opts.Context}
	}
	s, err := m.AcquireSession(ctx)
	if err != nil {
		if ctx.Err() != nil {
			res.Done = DoneCancel
		}
		return res, err
	}
	defer s.Close()

	res.Metrics.PromptTokens = len(prompt)
	sampler := NewSampler(req.Sampling)
	dec := m.tok.NewStreamDecoder()
	if len(req.Messages) > 0 {
		dec = m.tok.NewChatDecoder()
	}
	st := Stopper{Stops: req.Stop}
	history := append([]int32(nil), prompt...)
	var visible, thought strings.Builder
	emit := func(id int32, text, reasoning string) error {
		visible.WriteString(text)
		thought.WriteString(reasoning)
		if onToken != nil {
			return onToken(Token{ID: id, Text: text, Reasoning: reasoning})
		}
		return nil
	}
	N := m.info.Layers
	var decodeStart time.Time
	var target SpecModel // the session as a speculative target, from the first token on
	var k *SpecK
	// take handles one generated token: whether the answer ends with it.
	take := func(id int32) (bool, error) {
		if len(res.Tokens) == 0 {
			res.Metrics.TTFT = time.Since(start)
		}
		res.Tokens = append(res.Tokens, id)
		history = append(history, id)
		if m.tok.IsEOG(id) {
			res.Done = DoneStop
			return true, nil
		}
		piece, reasoning, err := dec.Step(id)
		if err != nil {
			return true, err
		}
		out, stopped := st.Add(piece)
		if err := emit(id, out, reasoning); err != nil {
			return true, err
		}
		if stopped {
			res.Done = DoneStop
			return true, nil
		}
		if req.MaxTokens > 0 && len(res.Tokens) >= req.MaxTokens {
			res.Done = DoneLength
			return true, nil
		}
		return false, nil
	}
	draft := req.Draft
	opening := openDraft(ctx, req.OpenDraft, prompt)
	defer opening.close()
	for {
		if err := ctx.Err(); err != nil {
			res.Done = DoneCancel
			break
		}
		if d, err := opening.ready(); err != nil {
			res.DraftError = err.Error()
		} else if d != nil && draft == nil {
			draft = d
		}
		if draft != nil && target == nil && len(res.Tokens) > 0 {
			// The session holds the answer but its last token: from here
			// on it is the target of speculative rounds, with this sampler.
			target = &sessionSpec{s: s, sampler: sampler, hist: slices.Clone(history[:s.Pos()])}
			k = NewSpecCost(req.DraftMin, req.DraftMax)
		}
		if draft != nil && target != nil {
			// A speculative round: the step holds the last token and the
			// proposals, which must fit the context.
			n := m.opts.Context - len(history)
			if req.MaxTokens > 0 {
				n = min(n, req.MaxTokens-len(res.Tokens)-1) // with the target's own token, the end
			}
			if n < 0 {
				res.Done = DoneLength
				break
			}
			add, drafts, err := k.Round(ctx, target, draft, history, n)
			if errors.Is(err, ErrDraft) || errors.Is(err, ErrSpec) {
				res.DraftError = err.Error()
				draft = nil
				if err := target.Truncate(len(history) - 1); err != nil {
					return res, err
				}
				continue // plainly from here
			}
			if err != nil {
				if ctx.Err() != nil {
					res.Done = DoneCancel
					break
				}
				return res, err
			}
			res.Drafted += len(drafts)
			res.DraftAccepted += len(add) - 1
			res.DraftRounds++
			end := false
			for _, id := range add {
				if end, err = take(id); end {
					break
				}
			}
			if err != nil {
				return res, err
			}
			if end {
				break
			}
			continue
		}
		in := history[s.Pos():]
		if m.opts.Context-s.Pos() < len(in) {
			res.Done = DoneLength
			break
		}
		t0 := time.Now()
		logits, err := s.RunRange(ctx, 0, N, in, nil)
		if err != nil {
			if ctx.Err() != nil {
				res.Done = DoneCancel
				break
			}
			return res, err
		}
		if len(res.Tokens) == 0 {
			res.Metrics.Prefill = time.Since(t0)
			decodeStart = time.Now()
		}
		id, err := sampler.Sample(logits, history)
		if err != nil {
			return res, err
		}
		end, err := take(id)
		if err != nil {
			return res, err
		}
		if end {
			break
		}
	}
	if !st.Hit() { // emit text held back for stop strings or mid-character
		text, reasoning := dec.FlushStep()
		if rest := st.Flush(text); rest != "" || reasoning != "" {
			if err := emit(-1, rest, reasoning); err != nil {
				return res, err
			}
		}
	}
	res.Text, res.Reasoning = visible.String(), thought.String()
	mt := &res.Metrics
	mt.GeneratedTokens = len(res.Tokens)
	if mt.Prefill > 0 {
		mt.PrefillTPS = float64(mt.PromptTokens) / mt.Prefill.Seconds()
	}
	if !decodeStart.IsZero() && len(res.Tokens) > 1 {
		mt.Decode = time.Since(decodeStart)
		mt.DecodeTPS = float64(len(res.Tokens)-1) / mt.Decode.Seconds()
	}
	if res.Done == DoneCancel {
		return res, ctx.Err()
	}
	return res, nil
}

// Stopper cuts streamed text before the first of its stop strings: it
// holds back text that may be the start of one until the next piece
// decides. Set Stops before the first Add; it is not safe for concurrent
// use. Generate cuts its text with one; a caller cutting text streamed
// from elsewhere (a node's answers, whatever strategy wrote them) uses one
// too, so that both cut alike.
type Stopper struct {
	Stops   []string
	pending string
	hit     bool
}

// Add appends text and returns what can be shown, and whether a stop string
// was found (the text before it is returned; the rest is dropped).
func (s *Stopper) Add(text string) (string, bool) {
	s.pending += text
	if len(s.Stops) == 0 {
		out := s.pending
		s.pending = ""
		return out, false
	}
	if cut, ok := FirstStop(s.pending, s.Stops); ok {
		out := s.pending[:cut]
		s.pending = ""
		s.hit = true
		return out, true
	}
	keep := 0
	for _, stop := range s.Stops {
		for k := min(len(stop)-1, len(s.pending)); k > keep; k-- {
			if strings.HasSuffix(s.pending, stop[:k]) {
				keep = k
				break
			}
		}
	}
	out := s.pending[:len(s.pending)-keep]
	s.pending = s.pending[len(s.pending)-keep:]
	return out, false
}

// Hit reports whether a stop string was found.
func (s *Stopper) Hit() bool { return s.hit }

// Flush returns held-back text plus tail when generation ends without a stop
// string.
func (s *Stopper) Flush(tail string) string {
	out, stopped := s.Add(tail)
	if stopped {
		return out
	}
	out += s.pending
	s.pending = ""
	return out
}

// FirstStop is the index in s of the earliest of the stop strings (empty
// ones are ignored), and whether there is one.
func FirstStop(s string, stops []string) (int, bool) {
	cut := -1
	for _, stop := range stops {
		if stop == "" {
			continue
		}
		if i := strings.Index(s, stop); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	return cut, cut >= 0
}

// draftOpening is a draft being opened beside a generation.
type draftOpening struct {
	ch     chan openedDraft
	cancel context.CancelFunc
	closer func()
}

type openedDraft struct {
	d     SpecModel
	close func()
	err   error
}

// openDraft opens a draft with open (nil: none) and has it run the prompt,
// in the background.
func openDraft(ctx context.Context, open func(context.Context) (SpecModel, func(), error), prompt []int32) *draftOpening {
	o := &draftOpening{}
	if open == nil {
		return o
	}
	dctx, cancel := context.WithCancel(ctx)
	o.ch, o.cancel = make(chan openedDraft, 1), cancel
	go func() {
		d, closeDraft, err := open(dctx)
		if err == nil {
			if _, _, err = d.Prefill(dctx, prompt); err != nil {
				closeDraft()
				d = nil
			}
		}
		o.ch <- openedDraft{d: d, close: closeDraft, err: err}
	}()
	return o
}

// ready returns the draft once it is open and has run the prompt, or why
// it could not be; nil, nil before that, and after.
func (o *draftOpening) ready() (SpecModel, error) {
	if o.ch == nil {
		return nil, nil
	}
	select {
	case r := <-o.ch:
		o.ch = nil
		if r.err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDraft, r.err)
		}
		o.closer = r.close
		return r.d, nil
	default:
		return nil, nil
	}
}

// close ends the opening (waiting for it) and closes the draft.
func (o *draftOpening) close() {
	if o.cancel != nil {
		o.cancel()
	}
	if o.ch != nil {
		if r := <-o.ch; r.err == nil && r.close != nil {
			r.close()
		}
		o.ch = nil
	}
	if o.closer != nil {
		o.closer()
	}
}
