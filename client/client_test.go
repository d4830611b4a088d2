package client

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStreamedErrors: an error that ends a stream does not claim the
// HTTP status of the stream (200); an error answer keeps its real one.
func TestStreamedErrors(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		body       string
		wantStatus int
		wantMsg    string
		notMsg     string
	}{
		{"in the stream", 200, "event: agent\ndata: {\"role\":\"reasoner\"}\n\n" +
			"event: error\ndata: {\"error\":{\"message\":\"no agent answered\",\"type\":\"no_response\",\"status\":503}}\n\n",
			503, "swarmd: no agent answered", "HTTP"},
		{"in the stream, no status", 200, "event: error\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"internal_error\"}}\n\n",
			0, "swarmd: boom", "HTTP 200"},
		{"before the stream", 400, `{"error":{"message":"prompt too long","type":"context_length_exceeded"}}`,
			400, "swarmd: prompt too long (HTTP 400)", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.status == 200 {
					w.Header().Set("Content-Type", "text/event-stream")
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			_, err := New(srv.URL, "").Query(t.Context(), QueryRequest{Query: "hi", Stream: true}, nil)
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != tc.wantStatus || ae.Error() != tc.wantMsg ||
				(tc.notMsg != "" && strings.Contains(ae.Error(), tc.notMsg)) {
				t.Fatalf("err = %v (%+v), want %q with status %d", err, ae, tc.wantMsg, tc.wantStatus)
			}
		})
	}
}
