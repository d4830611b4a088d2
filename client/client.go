package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// DefaultAddr is where swarmd's API listens unless configured otherwise.
const DefaultAddr = "127.0.0.1:7433"

// ErrNotRunning: nothing answers at the API address.
var ErrNotRunning = errors.New("swarmd is not running")

// APIError is an error answer of the API.
type APIError struct {
	// Status is the HTTP status of the answer; for an error that arrived
	// in a stream (Streamed), the status it would have had before the
	// stream began (0 if the server did not say).
	Status  int
	Message string
	Type    string
	// Streamed: the error ended a stream that had begun with HTTP 200.
	Streamed bool
}

func (e *APIError) Error() string {
	if e.Streamed { // the HTTP status was 200: quoting it would mislead
		return "swarmd: " + e.Message
	}
	return fmt.Sprintf("swarmd: %s (HTTP %d)", e.Message, e.Status)
}

// Client calls one swarmd's local API.
type Client struct {
	addr  string
	token string
	http  *http.Client
}

// New returns a client for the API at addr (HOST:PORT or http://HOST:PORT).
// token may be empty.
func New(addr, token string) *Client {
	if addr == "" {
		addr = DefaultAddr
	}
	return &Client{addr: strings.TrimSuffix(strings.TrimPrefix(addr, "http://"), "/"), token: token,
		http: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
}

// Addr is the API address the client calls.
func (c *Client) Addr() string { return c.addr }

// ID returns the peer's identity.
func (c *Client) ID(ctx context.Context) (ID, error) {
	var out ID
	return out, c.get(ctx, "/v1/swarm/id", &out)
}

// Peers returns the peer table.
func (c *Client) Peers(ctx context.Context) (Peers, error) {
	var out Peers
	return out, c.get(ctx, "/v1/swarm/peers", &out)
}

// Status returns the peer's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	return out, c.get(ctx, "/v1/swarm/status", &out)
}

// AddRole asks the peer to serve role with the GGUF at path on its
// machine (POST /v1/swarm/roles); it answers once the model is loaded.
func (c *Client) AddRole(ctx context.Context, role, path string) (Role, error) {
	var out Role
	b, err := json.Marshal(RoleRequest{Role: role, Path: path})
	if err != nil {
		return out, err
	}
	return out, c.do(ctx, http.MethodPost, "/v1/swarm/roles", bytes.NewReader(b), &out)
}

// RemoveRole asks the peer to stop serving role (DELETE
// /v1/swarm/roles/ROLE).
func (c *Client) RemoveRole(ctx context.Context, role string) error {
	var out map[string]string
	return c.do(ctx, http.MethodDelete, "/v1/swarm/roles/"+url.PathEscape(role), nil, &out)
}

// AddShard asks the peer to serve spec, "PATH.gguf:A-B" or
// "MODEL_CID:A-B" (POST /v1/swarm/shards); it answers once loaded.
func (c *Client) AddShard(ctx context.Context, spec string) (Shard, error) {
	var out Shard
	b, err := json.Marshal(ShardRequest{Shard: spec})
	if err != nil {
		return out, err
	}
	return out, c.do(ctx, http.MethodPost, "/v1/swarm/shards", bytes.NewReader(b), &out)
}

// RemoveShard asks the peer to stop serving layers [a,b) of model
// (DELETE /v1/swarm/shards/MODEL/A-B).
func (c *Client) RemoveShard(ctx context.Context, model string, a, b int) error {
	var out map[string]any
	return c.do(ctx, http.MethodDelete, fmt.Sprintf("/v1/swarm/shards/%s/%d-%d", url.PathEscape(model), a, b), nil, &out)
}

// PS fetches GET /v1/swarm/ps: the models the peer has loaded.
func (c *Client) PS(ctx context.Context) (PS, error) {
	var out PS
	return out, c.get(ctx, "/v1/swarm/ps", &out)
}

// Healthy reports whether the daemon answers /healthz.
func (c *Client) Healthy(ctx context.Context) error {
	var out map[string]any
	return c.get(ctx, "/healthz", &out)
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

// do sends one request and decodes the JSON answer into out.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, out any) error {
	if _, ok := ctx.Deadline(); !ok && method == http.MethodGet {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("swarmd at %s: bad answer to %s: %w", c.addr, path, err)
	}
	return nil
}

// send sends a request and turns transport failures and error answers into
// errors; the caller closes the body of a successful response.
func (c *Client) send(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.addr+path, body)
	if err != nil {
		return nil, fmt.Errorf("swarmd at %s: %w", c.addr, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if isRefused(err) {
			return nil, fmt.Errorf("%w at %s", ErrNotRunning, c.addr)
		}
		return nil, fmt.Errorf("swarmd at %s: %w", c.addr, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e Error
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			e.Error.Message = strings.TrimSpace(string(b))
		}
		return nil, &APIError{Status: resp.StatusCode, Message: e.Error.Message, Type: e.Error.Type}
	}
	return resp, nil
}

func isRefused(err error) bool {
	var op *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	return errors.As(err, &op) && op.Op == "dial"
}
