package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// roleLoadWait bounds `role add` when no --timeout is given: loading a
// multi-GB model on a slow device takes minutes.
const roleLoadWait = 10 * time.Minute

func runRole(ctx context.Context, e *env, args []string) error {
	fs := e.flags("role")
	pos, err := e.parse(fs, commands["role"].args, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 3 && pos[0] == "add":
		// The daemon reads the file: a relative path means this
		// directory's, made absolute for it.
		path, err := filepath.Abs(pos[2])
		if err != nil {
			return usageError{fmt.Sprintf("role add: path %q: %v", pos[2], err)}
		}
		wait := roleLoadWait
		if e.timeout > 0 {
			wait = e.timeout
		}
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		r, err := e.client.AddRole(ctx, pos[1], path)
		if err != nil {
			return e.explain(ctx, err)
		}
		if e.json {
			return printJSON(e.stdout, r)
		}
		fmt.Fprintf(e.stdout, "serving %s: %s (%s, %.1f tok/s)\n", r.Role, r.ModelName, r.ModelCID, r.TokPerSec)
		return nil
	case len(pos) == 2 && pos[0] == "rm":
		ctx, cancel := e.bounded(ctx)
		defer cancel()
		if err := e.client.RemoveRole(ctx, pos[1]); err != nil {
			return e.explain(ctx, err)
		}
		if !e.json {
			fmt.Fprintf(e.stdout, "no longer serving %s (requests running finish)\n", pos[1])
		}
		return nil
	}
	return usageError{"role: want `role add ROLE PATH.gguf` or `role rm ROLE`"}
}
