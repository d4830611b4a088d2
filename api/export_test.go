package api

import "time"

// SetTimeoutsForTest shortens the server's timeouts for servers built
// after it; the returned func restores them.
func SetTimeoutsForTest(header, body, idle time.Duration) (restore func()) {
	h, b, i := headerTimeout, bodyTimeout, idleTimeout
	headerTimeout, bodyTimeout, idleTimeout = header, body, idle
	return func() { headerTimeout, bodyTimeout, idleTimeout = h, b, i }
}

// SetStreamKeepAliveForTest sets how long a streamed answer stays quiet
// before a comment; the returned func restores it.
func SetStreamKeepAliveForTest(d time.Duration) (restore func()) {
	old := streamKeepAlive
	streamKeepAlive = d
	return func() { streamKeepAlive = old }
}
