package bmc

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.bug.st/serial"
)

// Bridge is the host side of the board's serial link. It keeps at most one
// request in flight (every request is shorter than the Uno's 64-byte receive
// buffer), skips line noise, resynchronises after a timeout, and when the
// device goes away reopens it in the background with exponential backoff.
// While disconnected, requests fail at once with ErrDisconnected.
//
// All methods are safe for concurrent use; requests are serialised.
type Bridge struct {
	path string
	opts Options
	log  *slog.Logger

	reqMu sync.Mutex // one request in flight

	mu   sync.Mutex
	cur  *link // nil while disconnected
	boot uint32

	events  chan Event
	dropped atomic.Int64

	closeOnce sync.Once
	closing   chan struct{}
	wg        sync.WaitGroup
}

// Open opens the board at path and completes a handshake, retrying with
// backoff until ctx is done. Once open, the bridge reconnects by itself.
func Open(ctx context.Context, path string, opts *Options) (*Bridge, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bridge{
		path:    path,
		opts:    o,
		log:     o.Logger.With("bmc", path),
		events:  make(chan Event, o.EventBuffer),
		closing: make(chan struct{}),
	}
	l, err := b.connectLoop(ctx)
	if err != nil {
		return nil, fmt.Errorf("bmc: open %s: %w", path, err)
	}
	b.install(l)
	b.wg.Add(1)
	go b.supervise(l)
	return b, nil
}

// Path returns the serial device path.
func (b *Bridge) Path() string { return b.path }

// Events returns the bridge's connection events. The channel is bounded and
// events that do not fit are dropped; it is closed by Close.
func (b *Bridge) Events() <-chan Event { return b.events }

// Connected reports whether the board is currently connected.
func (b *Bridge) Connected() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur != nil && b.cur.failed() == nil
}

// Boot returns the boot id of the board as last seen.
func (b *Bridge) Boot() uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boot
}

// Close stops reconnecting and closes the port. It is idempotent.
func (b *Bridge) Close() error {
	b.closeOnce.Do(func() {
		close(b.closing)
		b.wg.Wait()    // the supervisor has stopped installing links
		b.reqMu.Lock() // the request in flight, if any, has finished
		b.mu.Lock()
		l := b.cur
		b.cur = nil
		b.mu.Unlock()
		if l != nil {
			l.fail(ErrClosed)
			<-l.done
		}
		b.reqMu.Unlock()
		close(b.events)
	})
	return nil
}

func (b *Bridge) emit(e Event) {
	e.Time = time.Now()
	select {
	case <-b.closing:
		return
	default:
	}
	select {
	case b.events <- e:
	default:
		b.dropped.Add(1)
	}
}

func (b *Bridge) install(l *link) {
	b.mu.Lock()
	b.cur = l
	b.boot = l.boot
	b.mu.Unlock()
	b.log.Info("bmc: connected", "boot", l.boot, "fw", l.info.FW, "keyed", l.info.Keyed)
	b.emit(Event{Kind: EventConnected, Boot: l.boot})
}

// supervise waits for the current link to fail and replaces it.
func (b *Bridge) supervise(l *link) {
	defer b.wg.Done()
	for {
		select {
		case <-b.closing:
			return
		case <-l.done:
		}
		b.mu.Lock()
		if b.cur == l {
			b.cur = nil
		}
		b.mu.Unlock()
		b.log.Warn("bmc: device gone", "err", l.err)
		b.emit(Event{Kind: EventDisconnected, Err: l.err})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-b.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		nl, err := b.connectLoop(ctx)
		cancel()
		if err != nil {
			return // closing
		}
		select {
		case <-b.closing:
			nl.fail(ErrClosed)
			return
		default:
		}
		b.install(nl)
		l = nl
	}
}

// connectLoop dials until it succeeds or ctx is done.
func (b *Bridge) connectLoop(ctx context.Context) (*link, error) {
	delay := b.opts.MinBackoff
	for {
		l, err := b.dial(ctx)
		if err == nil {
			return l, nil
		}
		b.log.Debug("bmc: connect failed", "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, b.opts.MaxBackoff)
	}
}

// dial opens the port and handshakes: resync with a PING token, then INFO,
// then the configured CFG.
func (b *Bridge) dial(ctx context.Context) (*link, error) {
	port, err := serial.Open(b.path, &serial.Mode{BaudRate: b.opts.Baud})
	if err != nil {
		return nil, err
	}
	if b.opts.ResetOnConnect {
		if err := port.SetDTR(false); err != nil {
			b.log.Warn("bmc: cannot pulse DTR, board not reset", "err", err)
		} else {
			time.Sleep(50 * time.Millisecond)
			if err := port.SetDTR(true); err != nil {
				b.log.Warn("bmc: cannot raise DTR", "err", err)
			}
		}
	}
	if err := port.ResetInputBuffer(); err != nil {
		b.log.Debug("bmc: reset input buffer", "err", err)
	}
	l := newLink(port, b.log)
	if err := b.handshake(ctx, l); err != nil {
		l.fail(err)
		<-l.done
		return nil, err
	}
	return l, nil
}

func (b *Bridge) handshake(ctx context.Context, l *link) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.BootWait)
	defer cancel()
	for {
		err := b.resync(ctx, l, 300*time.Millisecond)
		if err == nil {
			break
		}
		if ctx.Err() != nil || l.failed() != nil {
			return fmt.Errorf("handshake: %w", err)
		}
	}
	var info Info
	err := b.exchange(ctx, l, []byte("INFO\n"), "INFO", b.opts.Timeout, func(r Reply) (bool, error) {
		v, ok := r.(Info)
		info = v
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("handshake INFO: %w", err)
	}
	if info.Proto != ProtocolVersion {
		return fmt.Errorf("%w: board speaks protocol %d, want %d", ErrMalformed, info.Proto, ProtocolVersion)
	}
	l.info, l.boot = info, info.Boot
	if b.opts.Config.Period != 0 {
		req, err := EncodeConfig(b.opts.Config)
		if err != nil {
			return err
		}
		if err := b.exchange(ctx, l, req, "CFG", b.opts.Timeout, acceptOK(nil)); err != nil {
			return fmt.Errorf("handshake CFG: %w", err)
		}
	}
	return nil
}

// resync ends any partial line on the board and waits for the echo of a
// fresh PING token, dropping every line before it.
func (b *Bridge) resync(ctx context.Context, l *link, timeout time.Duration) error {
	var tb [9]byte
	if _, err := rand.Read(tb[:]); err != nil {
		return err
	}
	tok := b64.EncodeToString(tb[:])
	req, err := EncodePing(tok)
	if err != nil {
		return err
	}
	err = b.exchange(ctx, l, append([]byte("\n"), req...), "PING", timeout, func(r Reply) (bool, error) {
		p, ok := r.(Pong)
		return ok && p.Token == tok, nil
	})
	if err != nil {
		return err
	}
	l.dirty, l.timeouts = false, 0
	return nil
}

// acceptOK accepts "OK <seq>" and stores the seq.
func acceptOK(seq *uint32) func(Reply) (bool, error) {
	return func(r Reply) (bool, error) {
		if ok, is := r.(OK); is {
			if seq != nil {
				*seq = ok.Seq
			}
			return true, nil
		}
		return false, nil
	}
}

// exchange writes req on l and feeds reply lines to accept until it reports
// done. "ERR" replies end the exchange with a *DeviceError; lines that do
// not parse are noise and skipped; READY means the board reset.
func (b *Bridge) exchange(ctx context.Context, l *link, req []byte, cmd string, timeout time.Duration, accept func(Reply) (bool, error)) error {
	// Lines that arrived while idle are stale or unsolicited.
	for drained := false; !drained; {
		select {
		case line := <-l.lines:
			b.unsolicited(l, line)
		default:
			drained = true
		}
	}
	if _, err := l.port.Write(req); err != nil {
		l.fail(err)
		return fmt.Errorf("%w: write: %w", ErrDisconnected, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			l.dirty = true
			return ctx.Err()
		case <-l.done:
			return fmt.Errorf("%w: %w", ErrDisconnected, l.err)
		case <-timer.C:
			l.dirty = true
			l.timeouts++
			if l.timeouts >= 3 {
				l.fail(fmt.Errorf("board silent after %d timeouts", l.timeouts))
			}
			return fmt.Errorf("%w: %s after %v", ErrTimeout, cmd, timeout)
		case line := <-l.lines:
			r, err := ParseLine(line)
			if err != nil {
				b.log.Debug("bmc: skipped line noise", "line", line)
				continue
			}
			switch v := r.(type) {
			case Ready:
				b.rebooted(l, v.Boot)
				l.dirty = true
				return ErrRebooted
			case ErrorReply:
				if cmd == "PING" {
					continue // the resync newline's "ERR empty"
				}
				l.timeouts = 0
				return &DeviceError{Cmd: cmd, Code: v.Code}
			}
			done, err := accept(r)
			if err != nil {
				return err
			}
			if done {
				l.timeouts = 0
				return nil
			}
			b.log.Debug("bmc: skipped unexpected reply", "cmd", cmd, "line", line)
		}
	}
}

func (b *Bridge) unsolicited(l *link, line string) {
	r, err := ParseLine(line)
	if err != nil {
		b.log.Debug("bmc: skipped line noise", "line", line)
		return
	}
	if v, ok := r.(Ready); ok {
		b.rebooted(l, v.Boot)
		return
	}
	b.log.Debug("bmc: skipped stale reply", "line", line)
}

// rebooted records a READY line. During a handshake (the link is not yet
// installed) a boot is expected and reported by EventConnected instead.
func (b *Bridge) rebooted(l *link, boot uint32) {
	l.boot = boot
	b.mu.Lock()
	installed := b.cur == l
	if installed {
		b.boot = boot
	}
	b.mu.Unlock()
	if installed {
		b.log.Warn("bmc: board rebooted", "boot", boot)
		b.emit(Event{Kind: EventRebooted, Boot: boot})
	}
}

// do runs one request on the current link.
func (b *Bridge) do(ctx context.Context, req []byte, timeout time.Duration, accept func(Reply) (bool, error)) error {
	cmd, _, _ := strings.Cut(strings.TrimSpace(string(req)), " ")
	b.reqMu.Lock()
	defer b.reqMu.Unlock()
	select {
	case <-b.closing:
		return ErrClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	l := b.cur
	b.mu.Unlock()
	if l == nil {
		return ErrDisconnected
	}
	if err := l.failed(); err != nil {
		return fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
	if l.dirty {
		if err := b.resync(ctx, l, b.opts.Timeout); err != nil {
			return fmt.Errorf("bmc: %s: resync: %w", cmd, err)
		}
	}
	if err := b.exchange(ctx, l, req, cmd, timeout, accept); err != nil {
		if errors.Is(err, ErrRejected) {
			return err
		}
		return fmt.Errorf("bmc: %s: %w", cmd, err)
	}
	return nil
}

// checkedDo runs a request whose encoding may have failed.
func (b *Bridge) checkedDo(ctx context.Context, req []byte, err error, accept func(Reply) (bool, error)) error {
	if err != nil {
		return err
	}
	return b.do(ctx, req, b.opts.Timeout, accept)
}
