package main

import (
	"context"
	"fmt"
)

func runID(ctx context.Context, e *env, args []string) error {
	fs := e.flags("id")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	id, err := e.client.ID(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, id)
	}
	fmt.Fprintln(e.stdout, id.PeerID)
	for _, a := range id.Addrs {
		fmt.Fprintf(e.stdout, "  %s/p2p/%s\n", a, id.PeerID)
	}
	return nil
}
