package main

import (
	"context"
	"fmt"
)

// runInvite prints a join token for the peer's swarm: the token alone on
// stdout (so that $(swarmctl invite) is the token), how to use it on
// stderr.
func runInvite(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "invite", args, func(ctx context.Context) error {
		inv, err := e.client.Invite(ctx)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, inv)
		}
		fmt.Fprintln(e.stdout, inv.Token)
		fmt.Fprintf(e.stderr, "Join token of swarm %s (peer %s).\n"+
			"On the new peer: swarmd --join TOKEN, or swarmctl join TOKEN while it runs.\n"+
			"It holds the swarm key: whoever has it can join, see your models and send you prompts.\n",
			inv.SwarmID, inv.PeerID)
		return nil
	})
}
