package main

import (
	"context"
	"fmt"

	"github.com/llmswarm/llmswarm/client"
)

func runID(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "id", args, func(ctx context.Context) error {
		id, err := e.client.ID(ctx)
		if err != nil {
			return err
		}
		return printID(e, id)
	})
}

func printID(e *env, id client.ID) error {
	if e.json {
		return printJSON(e.stdout, id)
	}
	fmt.Fprintln(e.stdout, id.PeerID)
	for _, a := range id.Addrs {
		fmt.Fprintf(e.stdout, "  %s/p2p/%s\n", a, id.PeerID)
	}
	return nil
}
