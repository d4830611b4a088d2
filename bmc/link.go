package bmc

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"go.bug.st/serial"
)

// maxLineNoise caps how many bytes without a newline the reader buffers
// before throwing them away as noise.
const maxLineNoise = 1024

// link is one open connection to the board: the port, a reader goroutine
// that splits input into lines, and the request-side state. A link never
// recovers; when it fails the bridge builds a new one.
type link struct {
	port  serial.Port
	lines chan string   // lines from the board, CR stripped
	done  chan struct{} // closed once the reader has exited
	log   *slog.Logger

	failOnce sync.Once
	err      error // why the link failed; read after done is closed

	// Guarded by Bridge.reqMu.
	dirty    bool // a reply may still be in flight: resync first
	timeouts int  // consecutive timeouts
	boot     uint32
	info     Info
}

func newLink(port serial.Port, log *slog.Logger) *link {
	l := &link{
		port:  port,
		lines: make(chan string, 256),
		done:  make(chan struct{}),
		log:   log,
	}
	go l.read()
	return l
}

// fail records why the link is unusable and closes the port, which unblocks
// the reader. Safe to call many times and from any goroutine.
func (l *link) fail(err error) {
	l.failOnce.Do(func() {
		l.err = err
		if cerr := l.port.Close(); cerr != nil {
			l.log.Debug("bmc: closing port", "err", cerr)
		}
	})
}

// failed returns the link's error once the reader has exited.
func (l *link) failed() error {
	select {
	case <-l.done:
		return l.err
	default:
		return nil
	}
}

func (l *link) read() {
	defer close(l.done)
	buf := make([]byte, 256)
	var acc []byte
	noise := false
	for {
		n, err := l.port.Read(buf)
		if err != nil {
			var pe *serial.PortError
			if errors.As(err, &pe) && pe.Code() == serial.PortClosed {
				err = fmt.Errorf("port closed: %w", err)
			}
			l.fail(err)
			return
		}
		acc = append(acc, buf[:n]...)
		for {
			i := bytes.IndexByte(acc, '\n')
			if i < 0 {
				break
			}
			line := string(bytes.TrimSuffix(acc[:i], []byte("\r")))
			acc = acc[i+1:]
			if noise {
				noise = false
				l.log.Debug("bmc: skipped overlong line")
				continue
			}
			select {
			case l.lines <- line:
			default:
				l.log.Debug("bmc: line dropped, nobody reading", "line", line)
			}
		}
		if len(acc) > maxLineNoise {
			acc, noise = acc[:0], true
		}
		if len(acc) == 0 {
			acc = nil // let a burst's backing array go
		}
	}
}
