package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// AddRoleWatched is AddRole with the load's progress: onTask sees each
// task the request runs (client.Task) as it goes.
func (c *Client) AddRoleWatched(ctx context.Context, role, path string, onTask func(Task)) (Role, error) {
	var out Role
	return out, c.postTasks(ctx, "/v1/swarm/roles", RoleRequest{Role: role, Path: path, Stream: true}, onTask, &out)
}

// AddShardWatched is AddShard with the fetch's and the load's progress:
// onTask sees each task the request runs as it goes.
func (c *Client) AddShardWatched(ctx context.Context, spec string, onTask func(Task)) (Shard, error) {
	var out Shard
	return out, c.postTasks(ctx, "/v1/swarm/shards", ShardRequest{Shard: spec, Stream: true}, onTask, &out)
}

// postTasks posts req, which asks for a stream, and reads its "task"
// events into onTask and its "result" into out.
func (c *Client) postTasks(ctx context.Context, path string, req any, onTask func(Task), out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.send(ctx, http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got := false
	err = readSSE(resp, func(event string, data []byte) error {
		switch event {
		case "task":
			var t Task
			if err := json.Unmarshal(data, &t); err != nil {
				return err
			}
			if onTask != nil {
				onTask(t)
			}
		case "result":
			got = true
			return json.Unmarshal(data, out)
		case "error":
			var e Error
			if err := json.Unmarshal(data, &e); err != nil {
				return err
			}
			return &APIError{Status: e.Error.Status, Message: e.Error.Message, Type: e.Error.Type, Streamed: true}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !got {
		return fmt.Errorf("swarmd at %s: %s stream ended without a result", c.addr, path)
	}
	return nil
}
