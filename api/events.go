package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

// eventsKeepAlive is how often a quiet event stream gets a comment line,
// so proxies and browsers keep it open.
const eventsKeepAlive = 20 * time.Second

// events serves GET /v1/swarm/events: server-sent events, a "snapshot"
// first, then every event of the peer's hub (client.SwarmEvent, as the SSE
// event of its type). It runs until the reader goes or the API shuts down.
func (a *server) events(w http.ResponseWriter, r *http.Request) {
	// Subscribe before the snapshot: nothing between the two is lost.
	evs, stop := a.b.Subscribe()
	defer stop()
	snap, err := a.b.EventsSnapshot()
	if err != nil {
		writeErr(w, err)
		return
	}
	data, err := json.Marshal(snap)
	if err != nil {
		writeErr(w, err)
		return
	}
	s := newSSE(w)
	s.event("snapshot", client.SwarmEvent{Type: "snapshot", TimeMS: time.Now().UnixMilli(), Data: data})
	keep := time.NewTicker(eventsKeepAlive)
	defer keep.Stop()
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				return
			}
			s.event(ev.Type, ev)
		case <-keep.C:
			s.comment("keep-alive")
		case <-r.Context().Done():
			return
		case <-a.ending:
			return
		}
	}
}

// eventsPath is the one endpoint that accepts the API token as a query
// parameter: a browser's EventSource cannot send an Authorization header.
const eventsPath = "/v1/swarm/events"

// queryToken is the ?token= of a GET of the events stream, the only
// request whose token may come in the URL.
func queryToken(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet || r.URL.Path != eventsPath || !r.URL.Query().Has("token") {
		return "", false
	}
	return r.URL.Query().Get("token"), true
}

// publicPath says whether r asks for the dashboard's static files, which
// hold no data and are served without the token (the page then asks for
// it and sends it with every API call).
func publicPath(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/ui/")
}
