package node

import "time"

// SetAPITimeoutsForTest shortens the API server's timeouts for servers
// started after it; the returned func restores them.
func SetAPITimeoutsForTest(header, body, idle time.Duration) (restore func()) {
	h, b, i := apiHeaderTimeout, apiBodyTimeout, apiIdleTimeout
	apiHeaderTimeout, apiBodyTimeout, apiIdleTimeout = header, body, idle
	return func() { apiHeaderTimeout, apiBodyTimeout, apiIdleTimeout = h, b, i }
}
