package node

import (
	"context"
	"sync"
)

// startLoads are Start's background loads of the configured roles and
// shards: the API answers (and shows their progress) while multi-GB
// weights load, a question asked meanwhile waits for them, and Close
// cancels them and waits.
type startLoads struct {
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed once every load has ended (after seal)
}

// begin gives the loads their context, a child of parent.
func (l *startLoads) begin(parent context.Context) {
	l.ctx, l.cancel = context.WithCancel(parent)
}

// run starts one load; f gets the loads' context.
func (l *startLoads) run(f func(ctx context.Context)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f(l.ctx)
	}()
}

// seal says every load has been started: ended closes once they end.
func (l *startLoads) seal() {
	done := make(chan struct{})
	l.done = done
	go func() { l.wg.Wait(); close(done) }()
}

// ended is closed once the sealed loads have ended; nil before seal.
func (l *startLoads) ended() <-chan struct{} { return l.done }

// stop cancels the loads and waits for them.
func (l *startLoads) stop() {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
}
