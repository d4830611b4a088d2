package dashboard

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(b)
}

// TestHandler: the page says whether the API wants a token, every answer
// carries the headers that keep it unframed and self-contained, files get
// their content types, and nothing but the embedded files is served.
func TestHandler(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{{Options{}, `content="none"`}, {Options{TokenRequired: true}, `content="token"`}} {
		resp, body := get(t, Handler(tc.o), "/")
		if resp.StatusCode != 200 || !strings.Contains(body, tc.want) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("%+v: GET / %d %s, want %s", tc.o, resp.StatusCode, resp.Header.Get("Content-Type"), tc.want)
		}
	}
	h := Handler(Options{})
	for path, ct := range map[string]string{"/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		resp, _ := get(t, h, path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ct) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET %s: headers %v", path, resp.Header)
		}
	}
	for _, path := range []string{"/ui/", "/ui/index.html", "/ui/missing.js", "/ui/../dashboard.go", "/ui/static/app.js", "/ui/x/y"} {
		if resp, body := get(t, h, path); resp.StatusCode != 404 || !strings.Contains(body, `"error"`) {
			t.Errorf("GET %s: %d %s, want a 404 error", path, resp.StatusCode, body)
		}
	}
}

// TestNoMarkupFromData: the script builds the page with text nodes only,
// so nothing the API returns (peer names, answers) is parsed as HTML.
func TestNoMarkupFromData(t *testing.T) {
	b, err := fs.ReadFile(static, "static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(string(b), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}
