package api_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestInviteEndpoints: the invitation (a secret) is served to the token
// holder only, never to another site's page; its QR code is a PNG; a bad
// join body or token is a 400 naming the problem; an open peer has no
// invitation.
func TestInviteEndpoints(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.APIToken = "s3cret"
	p := nodetest.Start(t, cfg)
	base := "http://" + p.APIAddr()
	auth := map[string]string{"Authorization": "Bearer s3cret"}
	for _, tc := range []apiCase{
		{method: "GET", path: "/v1/swarm/invite", status: 401, notWant: node.InvitePrefix},
		{method: "GET", path: "/v1/swarm/invite/qr.png", status: 401},
		{method: "POST", path: "/v1/swarm/join", body: `{"token":"x"}`, status: 401},
		{method: "GET", path: "/v1/swarm/invite", header: map[string]string{"Authorization": "Bearer s3cret", "Sec-Fetch-Site": "cross-site"}, status: 403, notWant: node.InvitePrefix},
		{method: "GET", path: "/v1/swarm/invite", header: auth, status: 200, want: `"token": "` + node.InvitePrefix},
		{method: "POST", path: "/v1/swarm/join", header: auth, body: `{"token":"swarm1-aaaa"}`, status: 400, want: "cut short"},
		{method: "POST", path: "/v1/swarm/join", header: auth, body: `{"token":"hello"}`, status: 400, want: "does not start with swarm1-"},
		{method: "POST", path: "/v1/swarm/join", header: auth, body: `{"tok":"x"}`, status: 400, want: `unknown field \"tok\"`},
	} {
		tc.run(t, base)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/swarm/invite/qr.png", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("qr.png: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
	}

	ocfg := nodetest.FreshConfig(t.TempDir())
	ocfg.Open = true
	open := nodetest.Start(t, ocfg)
	apiCase{method: "GET", path: "/v1/swarm/invite", status: 400, want: "open"}.run(t, "http://"+open.APIAddr())
}
