package node

import (
	"context"
	"net"
	"time"
)

// HTTPServer serves the peer's local HTTP API (its local API, the OpenAI
// API, the dashboard and /metrics) on the listener the node claims at
// Config.API. *http.Server is one: the api package builds it over the
// node's exported methods (api.New), so this package holds no handler.
type HTTPServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// apiListener is the API's listener and the server on it.
type apiListener struct {
	ln  net.Listener
	srv HTTPServer
}

func (a *apiListener) addr() string { return a.ln.Addr().String() }

// close stops the server, giving streams in flight two seconds to end.
func (a *apiListener) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		return a.srv.Close()
	}
	return nil
}
