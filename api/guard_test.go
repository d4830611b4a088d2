package api_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestAPIBrowserSafety: without a token, no web page can drive or read the
// API: a foreign Host (DNS rebinding) and cross-site requests are refused;
// loopback names with any port and the API's own origin are served.
func TestAPIBrowserSafety(t *testing.T) {
	p := nodetest.Start(t, nodetest.Config(t.TempDir()))
	base := "http://" + p.APIAddr()
	ok := func(h map[string]string) apiCase {
		return apiCase{method: "GET", path: "/v1/models", header: h, status: 200, want: "swarm-moa"}
	}
	refused := func(h map[string]string, want string) apiCase {
		return apiCase{method: "GET", path: "/v1/models", header: h, status: 403, want: want}
	}
	cases := []apiCase{
		ok(map[string]string{"Host": "localhost:7433"}),
		ok(map[string]string{"Host": "LOCALHOST"}),
		ok(map[string]string{"Host": "127.9.8.7:80"}),
		ok(map[string]string{"Host": "[::1]:7433"}),
		ok(map[string]string{"Origin": base}),
		ok(map[string]string{"Sec-Fetch-Site": "same-origin"}),
		ok(map[string]string{"Sec-Fetch-Site": "none"}),
		refused(map[string]string{"Host": "evil.example:7433"}, "DNS rebinding"),
		refused(map[string]string{"Host": "localhost.evil.example"}, "DNS rebinding"),
		refused(map[string]string{"Host": "10.0.0.1:7433"}, "DNS rebinding"),
		refused(map[string]string{"Origin": "http://evil.example"}, "cross-site"),
		refused(map[string]string{"Origin": "null"}, "cross-site"),
		refused(map[string]string{"Origin": "http://localhost:9999"}, "cross-site"),
		refused(map[string]string{"Sec-Fetch-Site": "cross-site"}, "cross-site"),
		refused(map[string]string{"Sec-Fetch-Site": "same-site"}, "cross-site"),
		// A page's simple POST: form or text/plain bodies, never JSON.
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi"}`, header: map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, status: 415, want: "application/json"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `}`, header: map[string]string{"Origin": "https://evil.example"}, status: 403, want: "cross-site"},
	}
	for _, tc := range cases {
		tc.run(t, base)
	}

	// With a token, any Host may be served: the token is the protection.
	cfg := nodetest.Config(t.TempDir())
	cfg.APIToken = "s3cret"
	tp := nodetest.Start(t, cfg)
	auth := map[string]string{"Host": "swarm.example:7433", "Authorization": "Bearer s3cret"}
	apiCase{method: "GET", path: "/v1/models", header: auth, status: 200, want: "swarm-moa"}.run(t, "http://"+tp.APIAddr())
	auth["Origin"] = "http://evil.example"
	apiCase{method: "GET", path: "/v1/models", header: auth, status: 403, want: "cross-site"}.run(t, "http://"+tp.APIAddr())
}

// TestAPITimeouts: half-sent requests and idle connections do not hold a
// connection forever, whether the request is served or refused, and on a
// token-protected API whether it carries the token or not.
func TestAPITimeouts(t *testing.T) {
	defer api.SetTimeoutsForTest(300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond)()
	p := nodetest.Start(t, nodetest.Config(t.TempDir()))
	cfg := nodetest.Config(t.TempDir())
	cfg.APIToken = "s3cret"
	tp := nodetest.Start(t, cfg)
	const halfBody = "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"query\":"
	cases := []struct {
		name, addr, send string
		want             string // in what the server sends before closing
	}{
		{"half-sent headers", p.APIAddr(), "POST /v1/swarm/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl", ""},
		{"half-sent body", p.APIAddr(), "POST /v1/swarm/query HTTP/1.1\r\nHost: 127.0.0.1\r\n" + halfBody, "408"},
		{"idle after an answer", p.APIAddr(), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "200 OK"},
		{"half-sent body to no endpoint", p.APIAddr(), "POST /v1/nosuch HTTP/1.1\r\nHost: 127.0.0.1\r\n" + halfBody, "404"},
		{"half-sent cross-site body", p.APIAddr(), "POST /v1/swarm/query HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n" + halfBody, "403"},
		{"half-sent body without the token", tp.APIAddr(), "POST /v1/swarm/query HTTP/1.1\r\nHost: 127.0.0.1\r\n" + halfBody, "401"},
		{"half-sent body with a wrong token", tp.APIAddr(), "POST /v1/swarm/query HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer guess\r\n" + halfBody, "401"},
		{"half-sent body with the token", tp.APIAddr(), "POST /v1/swarm/query HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer s3cret\r\n" + halfBody, "408"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			c.SetReadDeadline(start.Add(10 * time.Second)) // far beyond the server's timeouts
			got, err := io.ReadAll(bufio.NewReader(c))
			if err != nil {
				t.Fatalf("connection still open after %s: %v (read %q)", time.Since(start).Round(time.Millisecond), err, got)
			}
			if !strings.Contains(string(got), tc.want) {
				t.Fatalf("server sent %q, want %q", got, tc.want)
			}
		})
	}
	// The deadline on a body does not outlive it.
	resp, err := http.Get("http://" + p.APIAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz after the timeouts: %s", resp.Status)
	}
}
