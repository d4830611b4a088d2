// Package api is a peer's HTTP surface: the local API (/v1/swarm/...),
// the OpenAI-compatible API (/v1/chat/completions, /v1/models), the
// Prometheus metrics (/metrics) and the dashboard (/). It holds no state of
// its own and talks to the peer only through Backend, the node's exported
// methods, the way tailscale's localapi talks to its backend: node is the
// wiring of one peer, this package is how people and programs reach it.
package api

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/dashboard"
	"github.com/llmswarm/llmswarm/node"
)

// Backend is what the API needs of a peer; *node.Node is one.
type Backend interface {
	ID() (client.ID, error)
	Peers() (client.Peers, error)
	Status() (client.Status, error)
	PS() (client.PS, error)
	BMC() (client.BMC, error)
	Shards() (client.Shards, error)
	Ledger() (client.Ledger, error)
	Plan(model string) (client.Plan, error)
	Models() []client.ModelInfo
	ResolveModel(name string) (mode, model string, err error)
	Query(ctx context.Context, req client.QueryRequest, on func(event string, v any)) (*node.Answer, error)
	AddRole(ctx context.Context, role, path string) (client.Role, error)
	RemoveRole(role string) error
	AddShard(ctx context.Context, spec string) (client.Shard, error)
	RemoveShard(model string, start, end int) error
	Pull(ctx context.Context, model, token string, on func(client.Task)) (client.Pulled, error)
	Subscribe() (<-chan client.SwarmEvent, func())
	EventsSnapshot() (client.EventsSnapshot, error)
	Metrics() prometheus.Gatherer
	APIToken() string
	Invite() (client.Invite, error)
	Join(ctx context.Context, token string) (client.Joined, error)
}

var _ Backend = (*node.Node)(nil)

// Timeouts of the server. Without them a client that sends half a
// request holds a connection (and a goroutine) forever. They are variables
// so that a test can shorten them.
var (
	headerTimeout = 10 * time.Second  // request line and headers
	bodyTimeout   = 30 * time.Second  // a request body, once the headers are in
	idleTimeout   = 120 * time.Second // a kept-alive connection between requests
)

// server is the API over one backend.
type server struct {
	b      Backend
	mux    *http.ServeMux
	log    *slog.Logger
	warned sync.Map      // request fields ignored and already logged
	ending chan struct{} // closed when the server shuts down: ends event streams
	// dash is the dashboard's handler: [0] for a peer without an API
	// token, [1] for one with (the page then asks for it).
	dash [2]http.Handler
}

// New is the API server over b, for node.Node's API field: set it before
// the node starts, and the node serves it on its API address. log, when
// not nil, gets the server's own errors and the once-per-field notes of
// ignored request fields.
func New(b Backend, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &server{b: b, mux: http.NewServeMux(), log: log, ending: make(chan struct{}),
		dash: [2]http.Handler{dashboard.Handler(dashboard.Options{}), dashboard.Handler(dashboard.Options{TokenRequired: true})}}
	a.routes()
	// No ReadTimeout or WriteTimeout: answers stream for minutes.
	// bodyDeadline bounds the time a request body may take.
	srv := &http.Server{
		Handler:           bodyDeadline(a.browserGuard(a.auth(a.mux))),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	srv.RegisterOnShutdown(func() { close(a.ending) })
	return srv
}

func (a *server) routes() {
	m := a.mux
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
	})
	m.HandleFunc("GET /v1/swarm/id", func(w http.ResponseWriter, r *http.Request) { serveValue(w, a.b.ID) })
	m.HandleFunc("GET /v1/swarm/peers", func(w http.ResponseWriter, r *http.Request) { serveValue(w, a.b.Peers) })
	m.HandleFunc("GET /v1/swarm/status", func(w http.ResponseWriter, r *http.Request) { serveValue(w, a.b.Status) })
	m.HandleFunc("GET /v1/swarm/ps", func(w http.ResponseWriter, r *http.Request) { serveValue(w, a.b.PS) })
	m.HandleFunc("GET /v1/swarm/bmc", func(w http.ResponseWriter, r *http.Request) { serveValue(w, a.b.BMC) })
	m.HandleFunc("GET /v1/swarm/shards", func(w http.ResponseWriter, r *http.Request) { serveValue(w, a.b.Shards) })
	m.HandleFunc("GET /v1/swarm/ledger", func(w http.ResponseWriter, r *http.Request) { serveValue(w, a.b.Ledger) })
	m.HandleFunc("GET /v1/swarm/plan", func(w http.ResponseWriter, r *http.Request) {
		serveValue(w, func() (client.Plan, error) { return a.b.Plan(r.URL.Query().Get("model")) })
	})
	m.HandleFunc("GET /v1/swarm/invite", a.invite)
	m.HandleFunc("GET /v1/swarm/invite/qr.png", a.inviteQR)
	m.HandleFunc("POST /v1/swarm/join", a.join)
	m.HandleFunc("POST /v1/swarm/roles", a.addRole)
	m.HandleFunc("DELETE /v1/swarm/roles/{role}", a.removeRole)
	m.HandleFunc("POST /v1/swarm/shards", a.addShard)
	m.HandleFunc("DELETE /v1/swarm/shards/{model}/{range}", a.removeShard)
	m.HandleFunc("POST /v1/swarm/query", a.query)
	m.HandleFunc("POST /v1/models/pull", a.pull)
	m.HandleFunc("POST /v1/chat/completions", a.chatCompletions)
	m.HandleFunc("POST /v1/completions", a.completions)
	m.HandleFunc("GET /v1/models", a.models)
	m.HandleFunc("GET /v1/models/{id...}", a.model)
	m.HandleFunc("GET "+eventsPath, a.events)
	m.HandleFunc("GET /{$}", a.dashboard)
	m.HandleFunc("GET /ui/", a.dashboard)
	m.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		promhttp.HandlerFor(a.b.Metrics(), promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}).ServeHTTP(w, r)
	})
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A known path asked with the wrong method is 405, not 404.
		if allow := a.allowed(r); allow != "" {
			w.Header().Set("Allow", allow)
			refuse(w, r, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+" (allowed: "+allow+")")
			return
		}
		refuse(w, r, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
}

// dashboard serves the web dashboard's page and files.
func (a *server) dashboard(w http.ResponseWriter, r *http.Request) {
	i := 0
	if a.b.APIToken() != "" {
		i = 1
	}
	a.dash[i].ServeHTTP(w, r)
}

// auth requires the bearer token, when one is configured, on everything but
// /healthz and the dashboard's static files; the events stream may carry it
// as ?token= (see queryToken). The comparison is constant-time.
func (a *server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token := a.b.APIToken(); token != "" && r.URL.Path != "/healthz" && !publicPath(r) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok {
				got, ok = queryToken(r)
			}
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				refuse(w, r, http.StatusUnauthorized, "unauthorized", "missing or wrong API token")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// serveValue answers with what get returns, or its error.
func serveValue[T any](w http.ResponseWriter, get func() (T, error)) {
	v, err := get()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// allowed lists the methods a path serves, "" for an unknown path.
func (a *server) allowed(r *http.Request) string {
	var methods []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		if _, pattern := a.mux.Handler(&http.Request{Method: m, URL: r.URL, Host: r.Host}); pattern != "/" && pattern != "" {
			methods = append(methods, m)
		}
	}
	return strings.Join(methods, ", ")
}
