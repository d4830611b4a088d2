// Package hubtest is a model hub for tests: an HTTP server that answers
// as Hugging Face does (the tree API with each file's LFS sha256, resolve
// URLs that redirect to a CDN on another host, Range on the CDN, 401 on a
// gated repo without a token), with faults to inject: a connection cut
// mid-body, corrupted bytes, a CDN that ignores Range.
package hubtest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Hub is the test hub; its fault switches and counters are methods, safe
// to use while requests run.
type Hub struct {
	URL   string // the hub's base, for Hub.Endpoint or HF_ENDPOINT
	Token string // the token gated repos want

	mu        sync.Mutex
	repos     map[string]*repo
	cutAfter  int64
	hangAfter int64
	corrupt   bool
	ignore    bool
	ranges    []string
	cdnAuth   int
	pageSize  int

	hub, cdn *httptest.Server
}

type repo struct {
	gated bool
	files map[string][]byte
	order []string
}

// New starts a hub and its CDN; they stop at the end of the test. The CDN
// is reached as "localhost" and the hub as "127.0.0.1", two hosts.
func New(t testing.TB) *Hub {
	h := &Hub{repos: map[string]*repo{}, Token: "hf_test_token"}
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	t.Cleanup(h.hub.Close)
	t.Cleanup(h.cdn.Close)
	h.URL = h.hub.URL
	return h
}

// Add puts a file in a repo (owner/name), creating it; gated repos need
// the token.
func (h *Hub) Add(repoName, path string, data []byte, gated bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repoName]
	if r == nil {
		r = &repo{files: map[string][]byte{}}
		h.repos[repoName] = r
	}
	r.gated = r.gated || gated
	if _, ok := r.files[path]; !ok {
		r.order = append(r.order, path)
	}
	r.files[path] = data
}

// CutAfter makes the next CDN answer end after n bytes, as a dropped link
// does (once).
func (h *Hub) CutAfter(n int64) { h.set(func() { h.cutAfter = n }) }

// HangAfter makes the next CDN answer stop sending after n bytes and hold
// the connection open, as a hung server does (once).
func (h *Hub) HangAfter(n int64) { h.set(func() { h.hangAfter = n }) }

// Corrupt makes every CDN answer flip a byte (or stop doing so).
func (h *Hub) Corrupt(on bool) { h.set(func() { h.corrupt = on }) }

// IgnoreRange makes the CDN answer 200 with the whole file to a Range
// request (or stop doing so).
func (h *Hub) IgnoreRange(on bool) { h.set(func() { h.ignore = on }) }

// PageSize splits tree listings into pages of n files, linked by Link:
// rel="next" as the hub does (0: one page).
func (h *Hub) PageSize(n int) { h.set(func() { h.pageSize = n }) }

// Ranges are the Range headers the CDN saw since the last call ("" for
// none); the call clears them.
func (h *Hub) Ranges() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.ranges
	h.ranges = nil
	return r
}

// CDNAuth counts CDN requests that carried an Authorization header (the
// token must not leave the hub's host).
func (h *Hub) CDNAuth() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cdnAuth
}

func (h *Hub) set(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

// SHA256 is the hex sha256 of data, as the hub publishes it.
func SHA256(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	path := r.URL.Path
	if rest, ok := strings.CutPrefix(path, "/api/models/"); ok {
		parts := strings.SplitN(rest, "/", 4) // owner, name, "tree", rev
		if len(parts) < 4 || parts[2] != "tree" {
			http.Error(w, `{"error":"bad path"}`, http.StatusBadRequest)
			return
		}
		rp, ok := h.repoFor(w, r, parts[0]+"/"+parts[1])
		if !ok {
			return
		}
		h.tree(w, r, rp)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 5) // owner, name, "resolve", rev, file
	if len(parts) < 5 || parts[2] != "resolve" {
		http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
		return
	}
	rp, ok := h.repoFor(w, r, parts[0]+"/"+parts[1])
	if !ok {
		return
	}
	data, ok := rp.files[parts[4]]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, `{"error":"Entry not found"}`, http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", "0123456789abcdef0123456789abcdef01234567")
	w.Header().Set("X-Linked-Etag", `"`+SHA256(data)+`"`)
	w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
	cdn := strings.Replace(h.cdn.URL, "127.0.0.1", "localhost", 1)
	http.Redirect(w, r, cdn+"/"+SHA256(data), http.StatusFound)
}

// repoFor finds a repo the request may read, or answers as the hub does:
// 401 for a missing or gated repo without the token (the hub does not say
// which), 403 for a wrong token.
func (h *Hub) repoFor(w http.ResponseWriter, r *http.Request, name string) (*repo, bool) {
	rp := h.repos[name]
	auth := r.Header.Get("Authorization")
	switch {
	case rp == nil && auth == "":
		http.Error(w, `{"error":"Repository not found"}`, http.StatusUnauthorized)
	case rp == nil:
		http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
	case rp.gated && auth == "":
		http.Error(w, `{"error":"Access to model `+name+` is restricted. You must have access to it and be authenticated to access it. Please log in."}`, http.StatusUnauthorized)
	case rp.gated && auth != "Bearer "+h.Token:
		http.Error(w, `{"error":"Access to model `+name+` is restricted and you are not in the authorized list."}`, http.StatusForbidden)
	default:
		return rp, true
	}
	return nil, false
}

func (h *Hub) tree(w http.ResponseWriter, r *http.Request, rp *repo) {
	type lfs struct {
		OID  string `json:"oid"`
		Size int    `json:"size"`
	}
	type entry struct {
		Type string `json:"type"`
		OID  string `json:"oid"`
		Size int    `json:"size"`
		Path string `json:"path"`
		LFS  *lfs   `json:"lfs,omitempty"`
	}
	entries := []entry{{Type: "directory", OID: "d0", Path: "docs"}}
	for _, p := range rp.order {
		data := rp.files[p]
		e := entry{Type: "file", OID: SHA256(data)[:40], Size: len(data), Path: p}
		if strings.HasSuffix(p, ".gguf") { // LFS: size and oid of the pointer's target
			e.Size, e.LFS = 134, &lfs{OID: SHA256(data), Size: len(data)}
		}
		entries = append(entries, e)
	}
	if h.pageSize > 0 {
		start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		end := min(start+h.pageSize, len(entries))
		if end < len(entries) {
			next := *r.URL
			q := next.Query()
			q.Set("cursor", strconv.Itoa(end))
			next.RawQuery = q.Encode()
			w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, h.URL, next.RequestURI()))
		}
		entries = entries[start:end]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(entries)
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	var data []byte
	for _, rp := range h.repos {
		for _, d := range rp.files {
			if "/"+SHA256(d) == r.URL.Path {
				data = d
			}
		}
	}
	rng := r.Header.Get("Range")
	h.ranges = append(h.ranges, rng)
	if r.Header.Get("Authorization") != "" {
		h.cdnAuth++
	}
	cut, hang, corrupt, ignore := h.cutAfter, h.hangAfter, h.corrupt, h.ignore
	h.cutAfter, h.hangAfter = 0, 0
	h.mu.Unlock()
	if data == nil {
		http.NotFound(w, r)
		return
	}
	start := int64(0)
	if rng != "" && !ignore {
		a, _, _ := strings.Cut(strings.TrimPrefix(rng, "bytes="), "-")
		start, _ = strconv.ParseInt(a, 10, 64)
		if start >= int64(len(data)) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
	}
	body := append([]byte(nil), data[start:]...)
	if corrupt && len(body) > 0 {
		body[len(body)/2] ^= 0xff
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Accept-Ranges", "bytes")
	if rng != "" && !ignore {
		w.WriteHeader(http.StatusPartialContent)
	}
	if hang > 0 && hang < int64(len(body)) {
		w.Write(body[:hang])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		<-r.Context().Done() // until the client gives up
		return
	}
	if cut > 0 && cut < int64(len(body)) {
		w.Write(body[:cut])
		// End the connection mid-body, as a dropped Wi-Fi link does.
		if hj, ok := w.(http.Hijacker); ok {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
		return
	}
	w.Write(body)
}
