package api

import (
	"net/http"
	"strings"

	"rsc.io/qr"

	"github.com/llmswarm/llmswarm/client"
)

// The invitation endpoints hand out and take the swarm key: like the rest
// of the local API they are served on loopback or behind the API token
// only, and browserGuard keeps other sites' pages away from them.

// invite serves GET /v1/swarm/invite.
func (a *server) invite(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	serveValue(w, a.b.Invite)
}

// inviteQR serves GET /v1/swarm/invite/qr.png: the join token as a QR
// code, for a phone's camera. The token goes in upper case: QR's
// alphanumeric mode holds it in fewer modules than bytes would, and
// node.ParseInvite takes either case.
func (a *server) inviteQR(w http.ResponseWriter, r *http.Request) {
	inv, err := a.b.Invite()
	if err != nil {
		writeErr(w, err)
		return
	}
	code, err := qr.Encode(strings.ToUpper(inv.Token), qr.M)
	if err != nil {
		writeErr(w, err)
		return
	}
	code.Scale = 6
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(code.PNG())
}

// join serves POST /v1/swarm/join.
func (a *server) join(w http.ResponseWriter, r *http.Request) {
	var req client.JoinRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	out, err := a.b.Join(r.Context(), req.Token)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
