// Package nettest holds network fault injection for tests: a loopback TCP
// proxy that can freeze (bytes stop flowing both ways while the
// connections stay open, as when a peer is SIGSTOPped or its link hangs)
// and thaw, or delay every byte by a fixed latency (a link's round trip).
// Peers reached through it can be hung or moved away without touching
// their code.
package nettest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards every connection made to Addr to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	delay  time.Duration // each way
	frozen bool
	thaw   chan struct{} // closed when frozen ends
	budget int64         // with counting: bytes still forwarded before it freezes
	count  bool
	conns  []net.Conn
	closed bool
}

// NewProxy listens on a loopback port and forwards to target until the
// test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, thaw: make(chan struct{})}
	close(p.thaw)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Freeze stops forwarding: bytes in flight wait until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen = true
		p.thaw = make(chan struct{})
	}
}

// FreezeAfter lets n more bytes through, either way, and then freezes:
// a peer that hangs in the middle of a transfer.
func (p *Proxy) FreezeAfter(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budget, p.count = n, true
}

// SetDelay holds every chunk d before forwarding it, each way (a round
// trip of 2d through the proxy), without limiting throughput.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Thaw resumes forwarding.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			u.Close()
			return
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

// pipe copies src to dst, holding each chunk while the proxy is frozen
// and until its delay has passed; a second goroutine writes, so chunks in
// flight overlap as on a long link.
func (p *Proxy) pipe(dst, src net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer dst.Close()
		for c := range q {
			time.Sleep(time.Until(c.due))
			p.mu.Lock()
			if p.count {
				if p.budget -= int64(len(c.b)); p.budget < 0 && !p.frozen {
					p.count, p.frozen, p.thaw = false, true, make(chan struct{})
				}
			}
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				for range q { // drain until the reader stops
				}
				return
			}
		}
	}()
	defer close(q)
	defer src.Close()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			q <- chunk{buf[:n], time.Now().Add(d)}
		}
		if err != nil {
			return
		}
	}
}
