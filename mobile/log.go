package mobile

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Logger receives the peer's log lines: level is "INFO", "WARN" or
// "ERROR" (INFO and above are sent), line the message and its attributes
// as key=value pairs. Calls come from one goroutine, in order; a logger
// that falls behind loses lines (a line says how many), it never slows the
// peer. Its error (a Java or Swift exception) is dropped; it returns one
// for the reason AskHandler's methods do.
type Logger interface {
	Log(level, line string) error
}

// logBuffer is how many lines wait for a slow logger before lines drop.
const logBuffer = 256

// lineLog formats slog records as lines and hands them to a Logger from
// one goroutine. A nil *lineLog is no logger.
type lineLog struct {
	out     Logger
	mu      sync.RWMutex // held for reading to send, for writing to close
	closed  bool
	lines   chan logLine
	dropped atomic.Int64
}

type logLine struct{ level, line string }

func newLineLog(out Logger) *lineLog {
	l := &lineLog{out: out, lines: make(chan logLine, logBuffer)}
	go l.deliver()
	return l
}

func (l *lineLog) deliver() {
	for ln := range l.lines {
		l.reportDrops()
		_ = l.out.Log(ln.level, ln.line)
		if len(l.lines) == 0 {
			l.reportDrops()
		}
	}
}

// reportDrops says how many lines were dropped since it last did.
func (l *lineLog) reportDrops() {
	if n := l.dropped.Swap(0); n > 0 {
		_ = l.out.Log("WARN", fmt.Sprintf("mobile: %d log lines dropped: the logger fell behind", n))
	}
}

func (l *lineLog) send(ln logLine) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	select {
	case l.lines <- ln:
	default:
		l.dropped.Add(1)
	}
}

// close lets the lines already queued go out, and ends the goroutine once
// they have; it does not wait for them.
func (l *lineLog) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.lines)
	}
}

func (l *lineLog) slogger() *slog.Logger {
	if l == nil {
		return nil
	}
	return slog.New(&lineHandler{log: l})
}

// lineHandler is a slog.Handler writing "message key=value ..." lines.
type lineHandler struct {
	log    *lineLog
	attrs  string // pre-formatted attributes of WithAttrs, with a leading space
	prefix string // the open groups, "a.b."
}

func (h *lineHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.prefix, a)
		return true
	})
	h.log.send(logLine{level: r.Level.String(), line: b.String()})
	return nil
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range as {
		writeAttr(&b, h.prefix, a)
	}
	return &lineHandler{log: h.log, attrs: h.attrs + b.String(), prefix: h.prefix}
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &lineHandler{log: h.log, attrs: h.attrs, prefix: h.prefix + name + "."}
}

// writeAttr writes " key=value", groups flattened to "group.key=value".
func writeAttr(b *strings.Builder, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return
	}
	switch v.Kind() {
	case slog.KindGroup:
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			writeAttr(b, p, g)
		}
		return
	case slog.KindTime:
		v = slog.StringValue(v.Time().Format(time.RFC3339Nano))
	}
	b.WriteByte(' ')
	b.WriteString(prefix)
	b.WriteString(a.Key)
	b.WriteByte('=')
	s := v.String()
	if s == "" || strings.ContainsAny(s, " =\"\n\t") {
		s = strconv.Quote(s)
	}
	b.WriteString(s)
}
