package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/pipeline"
)

// drafter is the local draft model of pipeline.draft, loaded at its first
// use and kept until the peer stops; each speculating generation drafts in
// a session of its own.
type drafter struct {
	path string
	opts engine.Options

	mu     sync.Mutex
	m      *engine.Model
	err    error // the load's, kept: a file that failed once is not read again
	closed bool
}

// draft is pipeline.Originator.Drafter.
func (d *drafter) draft(_ context.Context, _ pipeline.ModelRef, tok *engine.Tokenizer, s pipeline.Sampling) (engine.SpecModel, func(), error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, nil, errors.New("pipeline.draft: the peer is stopping")
	}
	if d.m == nil && d.err == nil {
		// Not the request's context: a query cancelled during the load
		// must not leave the peer without its draft.
		d.m, d.err = engine.Load(context.Background(), d.path, d.opts)
		if d.err != nil {
			d.err = fmt.Errorf("pipeline.draft: %w", d.err)
		}
	}
	m, err := d.m, d.err
	d.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if fp := m.Tokenizer().Fingerprint(); fp != tok.Fingerprint() {
		return nil, nil, fmt.Errorf("pipeline.draft %s has another tokenizer (%d tokens, fingerprint %s) than the model asked for (%d, %s)",
			d.path, m.Tokenizer().VocabSize(), fp, tok.VocabSize(), tok.Fingerprint())
	}
	sess, err := m.NewSession()
	if err != nil {
		return nil, nil, err
	}
	return engine.SessionDraft(sess, s.Options()), sess.Close, nil
}

func (d *drafter) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.m != nil {
		d.m.Close()
		d.m = nil
	}
}
