package api

import "time"

// SetTimeoutsForTest shortens the server's timeouts for servers built
// after it; the returned func restores them.
func SetTimeoutsForTest(header, body, idle time.Duration) (restore func()) {
	h, b, i := headerTimeout, bodyTimeout, idleTimeout
	headerTimeout, bodyTimeout, idleTimeout = header, body, idle
	return func() { headerTimeout, bodyTimeout, idleTimeout = h, b, i }
}
