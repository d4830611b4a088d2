package api

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// browserGuard keeps web pages away from the API. Without a token, the
// loopback API trusts whoever can connect to it, and a browser on this
// machine can connect:
//   - DNS rebinding: a page at evil.example re-points its name at
//     127.0.0.1 and reads the answers as same-origin. Its requests carry
//     Host: evil.example, so without a token only loopback names are
//     served (a token is what makes any other Host safe);
//   - cross-site requests: a page posts to 127.0.0.1 directly. Browsers
//     mark them with Origin or Sec-Fetch-Site, and may send them without
//     asking first only as form or text/plain bodies: those are refused
//     (decodeBody wants application/json, which browsers never send
//     cross-site without a CORS preflight, which the API never grants).
func (a *server) browserGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.b.APIToken() == "" && !loopbackHost(r.Host) {
			writeError(w, http.StatusForbidden, "forbidden",
				"Host "+quoteHost(r.Host)+" is not a loopback name: refused (DNS rebinding); use 127.0.0.1, [::1] or localhost, or configure api_token")
			return
		}
		if why := crossSite(r); why != "" {
			writeError(w, http.StatusForbidden, "forbidden", "cross-site request refused: "+why)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine by a
// loopback name: localhost, 127.0.0.0/8 or [::1], with any port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// crossSite says why a request comes from another site's page, or "".
// Only the API's own origin may send an Origin header.
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none": // none: typed in the address bar
	default:
		return "Sec-Fetch-Site: " + site
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || !strings.EqualFold(u.Host, r.Host) {
		return "Origin " + quoteHost(origin) + " is not this API's own"
	}
	return ""
}

func quoteHost(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}
