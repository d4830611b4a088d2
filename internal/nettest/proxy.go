// Package nettest holds network fault injection for tests: a loopback TCP
// proxy that can freeze (bytes stop flowing both ways while the
// connections stay open, as when a peer is SIGSTOPped or its link hangs)
// and thaw. Peers reached through it can be hung without touching their
// code.
package nettest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards every connection made to Addr to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	thaw   chan struct{} // closed when frozen ends
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

// pipe copies src to dst, holding each chunk while the proxy is frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
