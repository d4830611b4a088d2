package node

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/dashboard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// apiServer is the local HTTP API.
type apiServer struct {
	ln     net.Listener
	srv    *http.Server
	n      *Node
	mux    *http.ServeMux
	log    *slog.Logger
	warned sync.Map      // request fields ignored and already logged
	ending chan struct{} // closed when the server shuts down: ends event streams
}

func startAPI(ln net.Listener, n *Node, log *slog.Logger) *apiServer {
	a := &apiServer{ln: ln, n: n, mux: http.NewServeMux(), log: log, ending: make(chan struct{})}
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
	})
	a.mux.HandleFunc("GET /v1/swarm/id", a.id)
	a.mux.HandleFunc("GET /v1/swarm/peers", a.peers)
	a.mux.HandleFunc("GET /v1/swarm/status", a.status)
	a.mux.HandleFunc("POST /v1/swarm/roles", a.addRole)
	a.mux.HandleFunc("DELETE /v1/swarm/roles/{role}", a.removeRole)
	a.mux.HandleFunc("POST /v1/swarm/shards", a.addShard)
	a.mux.HandleFunc("DELETE /v1/swarm/shards/{model}/{range}", a.removeShard)
	a.mux.HandleFunc("GET /v1/swarm/ps", func(w http.ResponseWriter, r *http.Request) { serveValue(w, n.PS) })
	a.mux.HandleFunc("GET /v1/swarm/bmc", a.bmc)
	a.mux.HandleFunc("POST /v1/swarm/query", a.query)
	a.mux.HandleFunc("POST /v1/chat/completions", a.chatCompletions)
	a.mux.HandleFunc("GET /v1/models", a.models)
	a.mux.HandleFunc("GET /v1/models/{id...}", a.model)
	a.mux.HandleFunc("GET /v1/swarm/shards", a.shardsView)
	a.mux.HandleFunc("GET /v1/swarm/plan", a.plan)
	a.mux.HandleFunc("GET "+eventsPath, a.events)
	dash := dashboard.Handler(dashboard.Options{TokenRequired: n.cfg.APIToken != ""})
	a.mux.Handle("GET /{$}", dash)
	a.mux.Handle("GET /ui/", dash)
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{n.metrics.reg, prometheus.DefaultGatherer},
		promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A known path asked with the wrong method is 405, not 404.
		if allow := a.allowed(r); allow != "" {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+" (allowed: "+allow+")")
			return
		}
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	// No ReadTimeout or WriteTimeout: answers stream for minutes.
	// decodeBody bounds the time a request body may take.
	a.srv = &http.Server{
		Handler:           a.browserGuard(a.auth(a.mux)),
		ReadHeaderTimeout: apiHeaderTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	a.srv.RegisterOnShutdown(func() { close(a.ending) })
	go a.srv.Serve(ln)
	return a
}

func (a *apiServer) addr() string { return a.ln.Addr().String() }

func (a *apiServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		return a.srv.Close()
	}
	return nil
}

// auth requires the bearer token, when one is configured, on everything but
// /healthz and the dashboard's static files; the events stream may carry it
// as ?token= (see queryToken). The comparison is constant-time.
func (a *apiServer) auth(next http.Handler) http.Handler {
	token := a.n.cfg.APIToken
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.URL.Path != "/healthz" && !publicPath(r) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok {
				got, ok = queryToken(r)
			}
			if !ok || !equalConstantTime(got, token) {
				writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong API token")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (a *apiServer) id(w http.ResponseWriter, r *http.Request) { serveValue(w, a.n.ID) }

func (a *apiServer) peers(w http.ResponseWriter, r *http.Request) { serveValue(w, a.n.Peers) }

func (a *apiServer) status(w http.ResponseWriter, r *http.Request) { serveValue(w, a.n.Status) }

// serveValue answers with what get returns, or 503 while the peer is not
// running.
func serveValue[T any](w http.ResponseWriter, get func() (T, error)) {
	v, err := get()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "peer is shutting down")
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// allowed lists the methods a path serves, "" for an unknown path.
func (a *apiServer) allowed(r *http.Request) string {
	var methods []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if m == r.Method {
			continue
		}
		if _, pattern := a.mux.Handler(&http.Request{Method: m, URL: r.URL, Host: r.Host}); pattern != "/" && pattern != "" {
			methods = append(methods, m)
		}
	}
	return strings.Join(methods, ", ")
}
