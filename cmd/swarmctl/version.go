package main

import (
	"context"
	"fmt"

	"github.com/llmswarm/llmswarm/internal/version"
)

// runVersion prints swarmctl's own version; it needs no daemon.
func runVersion(ctx context.Context, e *env, args []string) error {
	fs := e.flags("version")
	pos, err := e.parse(fs, "", args)
	if err != nil {
		return err
	}
	if err := noArgs("version", pos); err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, map[string]string{"version": version.String()})
	}
	fmt.Fprintln(e.stdout, "swarmctl", version.String())
	return nil
}
