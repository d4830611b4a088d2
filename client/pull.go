package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
)

// PullRequest is the body of POST /v1/models/pull: fetch Model from the
// peer's model hub into its data dir. Model is "hf.co/OWNER/REPO:QUANT",
// "hf.co/OWNER/REPO/FILE.gguf" or a short name ("qwen3:0.6b"). Token,
// when set, is sent to the hub instead of the peer's own (hub.token).
type PullRequest struct {
	Model  string `json:"model"`
	Token  string `json:"token,omitempty"`
	Stream bool   `json:"stream,omitempty"`
}

// Pulled is a pulled model: stored on the peer, registered under its CID
// and announced, ready for `swarmctl role add` or `shard add`.
type Pulled struct {
	Model  string `json:"model"` // as asked
	Repo   string `json:"repo"`
	File   string `json:"file"`
	Quant  string `json:"quant,omitempty"`
	Path   string `json:"path"` // on the peer's machine
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	CID    string `json:"cid"` // the model's root, as shards and pipelines name it
	Arch   string `json:"arch"`
	Name   string `json:"name,omitempty"`
	Layers int    `json:"layers"`
	// Already: the peer had the file (same size and checked sha256);
	// nothing was downloaded.
	Already bool `json:"already,omitempty"`
}

// Pull pulls a model. With req.Stream, onTask sees the pull's progress
// (client.Task) as it goes; the result is returned either way.
func (c *Client) Pull(ctx context.Context, req PullRequest, onTask func(Task)) (*Pulled, error) {
	var out Pulled
	if req.Stream {
		if err := c.postTasks(ctx, "/v1/models/pull", req, onTask, &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := c.do(ctx, http.MethodPost, "/v1/models/pull", bytes.NewReader(body), &out); err != nil {
		return nil, err
	}
	return &out, nil
}
