// Package dashboard is the web dashboard a peer's local API serves at /:
// static HTML, CSS and JavaScript embedded in the binary (no CDN, no build
// step), which read the API's JSON endpoints and the live feed of GET
// /v1/swarm/events from the same origin.
//
// It owns the files and the handler that serves them, with the headers
// that keep the page from being framed or from loading anything from
// elsewhere. It must not import node or any other package of the module:
// the page talks to the peer only through the HTTP API, as any client does.
package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Options configure the page.
type Options struct {
	// TokenRequired tells the page that the API wants a bearer token, so
	// it asks for one before its first call.
	TokenRequired bool
}

// Handler serves the page at / and its files under /ui/.
func Handler(o Options) http.Handler {
	index, err := fs.ReadFile(static, "static/index.html")
	if err != nil {
		panic("dashboard: index.html is not embedded: " + err.Error()) // a build defect
	}
	auth := "none"
	if o.TokenRequired {
		auth = "token"
	}
	index = bytes.Replace(index, []byte(`content="auth"`), []byte(`content="`+auth+`"`), 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Only this origin's scripts, styles and connections; never in
		// a frame (the chaos buttons must not be clickjacked); no
		// Referer (the events URL may carry the token).
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == "/" {
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.Write(index)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/ui/")
		b, err := fs.ReadFile(static, "static/"+name)
		if !ok || name == "" || name == "index.html" || strings.Contains(name, "/") || err != nil {
			notFound(w, r.URL.Path)
			return
		}
		if ct, ok := contentTypes[path.Ext(name)]; ok {
			h.Set("Content-Type", ct)
		}
		w.Write(b)
	})
}

// notFound answers 404 in the API's error shape.
func notFound(w http.ResponseWriter, p string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": "no such dashboard file: " + p, "type": "not_found"}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	w.Write(append(b, '\n'))
}

var contentTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml",
}
