package api

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
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
			refuse(w, r, http.StatusForbidden, "forbidden",
				"Host "+quoteHost(r.Host)+" is not a loopback name: refused (DNS rebinding); use 127.0.0.1, [::1] or localhost, or configure api_token")
			return
		}
		if why := crossSite(r); why != "" {
			refuse(w, r, http.StatusForbidden, "forbidden", "cross-site request refused: "+why)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bodyDeadline bounds the time a request's body may take, from the end of
// its headers, whoever reads it: decodeBody, or the server itself, which
// reads an unread body to its end after the answer, before it reuses or
// closes the connection. Without it a client that never finishes a body
// the handler did not read (a refused one above all: an unauthenticated
// client's) holds the connection for ever. decodeBody clears it once the
// body is in.
func bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers a request without reading its body. With a body it
// answers at once and closes the connection: otherwise the server would
// first wait for the body, to discard it, before sending the answer; after
// the answer it still reads what comes (within bodyDeadline's bound) so
// that a client still sending sees the answer, not a reset connection.
func refuse(w http.ResponseWriter, r *http.Request, status int, typ, msg string) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	writeError(w, status, typ, msg)
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
