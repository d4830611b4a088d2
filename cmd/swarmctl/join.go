package main

import (
	"context"
	"fmt"
	"time"
)

// runJoin makes the running peer join the swarm of a token, and waits
// until it is back with the new key.
func runJoin(ctx context.Context, e *env, args []string) error {
	fs := e.flags("join")
	pos, err := e.parse(fs, commands["join"].args, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"join takes one argument: the token swarmctl invite printed on a member of the swarm"}
	}
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	j, err := e.client.Join(ctx, pos[0])
	if err != nil {
		return e.explain(ctx, err)
	}
	if j.Restarting {
		// The peer restarts its network with the new key; its API comes
		// back on the same address.
		for {
			st, err := e.client.Status(ctx)
			if err == nil && st.SwarmID == j.SwarmID {
				break
			}
			select {
			case <-ctx.Done():
				return e.explain(ctx, fmt.Errorf("the peer did not come back with the new key: %w", ctx.Err()))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if e.json {
		return printJSON(e.stdout, j)
	}
	switch {
	case j.Previous != "":
		fmt.Fprintf(e.stdout, "joined swarm %s (left swarm %s; its key is kept as swarm.key.old)\n", j.SwarmID, j.Previous)
	case j.Restarting:
		fmt.Fprintf(e.stdout, "joined swarm %s\n", j.SwarmID)
	default:
		fmt.Fprintf(e.stdout, "already a member of swarm %s; dialing the inviting peer\n", j.SwarmID)
	}
	for _, b := range j.Bootstrap {
		fmt.Fprintf(e.stdout, "  bootstrap %s\n", b)
	}
	return nil
}
