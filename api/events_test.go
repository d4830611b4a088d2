package api_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// sseReader reads the events of GET /v1/swarm/events.
type sseReader struct {
	t  *testing.T
	sc *bufio.Scanner
}

// next returns the next event's name and its client.SwarmEvent.
func (r *sseReader) next() (string, client.SwarmEvent) {
	r.t.Helper()
	name := ""
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			var ev client.SwarmEvent
			if err := json.Unmarshal([]byte(line[len("data: "):]), &ev); err != nil {
				r.t.Fatalf("event %s: %v: %s", name, err, line)
			}
			return name, ev
		}
	}
	r.t.Fatalf("event stream ended: %v", r.sc.Err())
	return "", client.SwarmEvent{}
}

// TestEventsStream: with an API token, the dashboard's files are served
// without it and the events stream takes it as ?token= (no other endpoint
// does); the stream starts with a snapshot of the peer, then tells of a
// role added and removed at run time, and of the peer table changing.
func TestEventsStream(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.APIToken = "s3cret"
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
	p := nodetest.Start(t, cfg)
	base := "http://" + p.APIAddr()
	for _, tc := range []apiCase{
		{method: "GET", path: "/", status: 200, want: `<meta name="swarm-auth" content="token">`},
		{method: "GET", path: "/ui/app.js", status: 200, want: "EventSource"},
		{method: "GET", path: "/ui/style.css", status: 200, want: "--accent"},
		{method: "GET", path: "/ui/", status: 404},
		{method: "GET", path: "/ui/nope.js", status: 404},
		{method: "GET", path: "/v1/swarm/events", status: 401, want: "token"},
		{method: "GET", path: "/v1/swarm/events?token=wrong", status: 401, want: "token"},
		{method: "GET", path: "/v1/swarm/status?token=s3cret", status: 401, want: "token"},
		{method: "POST", path: "/v1/swarm/roles?token=s3cret", body: `{}`, status: 401, want: "token"},
		{method: "GET", path: "/v1/swarm/events?token=s3cret", header: map[string]string{"Origin": "http://evil.example"}, status: 403, want: "cross-site"},
		{method: "GET", path: "/", header: map[string]string{"Origin": "http://evil.example"}, status: 403, want: "cross-site"},
	} {
		tc.run(t, base)
	}
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("GET /: %s %q, want %q", k, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("GET /: Content-Security-Policy %q", csp)
	}

	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/swarm/events?token=s3cret", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	r := &sseReader{t: t, sc: bufio.NewScanner(resp.Body)}
	r.sc.Buffer(make([]byte, 64<<10), 4<<20)
	name, ev := r.next()
	var snap client.EventsSnapshot
	if name != "snapshot" || ev.Type != "snapshot" || json.Unmarshal(ev.Data, &snap) != nil ||
		snap.ID.PeerID != p.ID().String() || len(snap.Peers.Peers) != 1 || snap.BMC != nil {
		t.Fatalf("first event: %s %+v", name, ev)
	}
	// roles: wait for the event naming the role, skipping others.
	roles := func(want bool) {
		t.Helper()
		for {
			name, ev := r.next()
			if name != "roles" {
				continue
			}
			var ps client.PS
			if err := json.Unmarshal(ev.Data, &ps); err != nil {
				t.Fatal(err)
			}
			has := len(ps.Models) == 1 && len(ps.Models[0].Roles) == 1 && ps.Models[0].Roles[0] == moa.Writer
			if has != want {
				t.Fatalf("roles event: %+v, want writer served: %v", ps, want)
			}
			return
		}
	}
	c := client.New(p.APIAddr(), "s3cret")
	if _, err := c.AddRole(t.Context(), moa.Writer, nodetest.TinyModel(t, "f32")); err != nil {
		t.Fatal(err)
	}
	roles(true)
	if err := c.RemoveRole(t.Context(), moa.Writer); err != nil {
		t.Fatal(err)
	}
	roles(false)

	// Another peer joins: a "peers" event lists it.
	ocfg := nodetest.Config(t.TempDir())
	ocfg.Bootstrap = []string{p.Addr(t)}
	other := nodetest.Start(t, ocfg)
	deadline := time.Now().Add(20 * time.Second)
	for {
		name, ev := r.next()
		if name == "peers" {
			var ps client.Peers
			if err := json.Unmarshal(ev.Data, &ps); err != nil {
				t.Fatal(err)
			}
			if len(ps.Peers) == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no peers event lists %s", other.ID())
		}
	}
}
