package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
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
		bar := newTaskBar(e.stderr, e.stderrTTY)
		r, err := e.client.AddRoleWatched(ctx, pos[1], path, bar.show)
		bar.done()
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

func runShard(ctx context.Context, e *env, args []string) error {
	fs := e.flags("shard")
	pos, err := e.parse(fs, commands["shard"].args, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || (pos[0] != "add" && pos[0] != "rm") {
		return usageError{"shard: want `shard add PATH.gguf:A-B|MODEL:A-B` or `shard rm MODEL_CID:A-B`"}
	}
	i := strings.LastIndex(pos[1], ":")
	if i <= 0 {
		return usageError{fmt.Sprintf("shard %s %q: want SOURCE:A-B", pos[0], pos[1])}
	}
	src, rng := pos[1][:i], pos[1][i+1:]
	if pos[0] == "rm" {
		as, bs, ok := strings.Cut(rng, "-")
		a, err1 := strconv.Atoi(as)
		b, err2 := strconv.Atoi(bs)
		if !ok || err1 != nil || err2 != nil || a < 0 || b <= a {
			return usageError{fmt.Sprintf("shard rm: layer range %q: want A-B with 0 <= A < B", rng)}
		}
		ctx, cancel := e.bounded(ctx)
		defer cancel()
		if err := e.client.RemoveShard(ctx, src, a, b); err != nil {
			return e.explain(ctx, err)
		}
		if !e.json {
			fmt.Fprintf(e.stdout, "no longer serving layers [%d,%d) of %s (sessions open finish)\n", a, b, src)
		}
		return nil
	}
	if strings.HasSuffix(strings.ToLower(src), ".gguf") || strings.ContainsRune(src, filepath.Separator) {
		// The daemon reads the file: a relative path means this
		// directory's.
		if src, err = filepath.Abs(src); err != nil {
			return usageError{fmt.Sprintf("shard add: path: %v", err)}
		}
	}
	wait := roleLoadWait
	if e.timeout > 0 {
		wait = e.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	bar := newTaskBar(e.stderr, e.stderrTTY)
	sh, err := e.client.AddShardWatched(ctx, src+":"+rng, bar.show)
	bar.done()
	if err != nil {
		return e.explain(ctx, err)
	}
	if e.json {
		return printJSON(e.stdout, sh)
	}
	fmt.Fprintf(e.stdout, "serving layers [%d,%d) of %s (%s, %d layers in all)\n", sh.Start, sh.End, sh.ModelName, sh.ModelCID, sh.Layers)
	return nil
}
