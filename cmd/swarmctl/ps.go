package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/llmswarm/llmswarm/client"
)

func runPS(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "ps", args, func(ctx context.Context) error {
		ps, err := e.client.PS(ctx)
		if err != nil {
			return err
		}
		return printPS(e, ps)
	})
}

func printPS(e *env, ps client.PS) error {
	if e.json {
		return printJSON(e.stdout, ps)
	}
	if len(ps.Models) == 0 {
		fmt.Fprintln(e.stdout, "no model loaded")
	} else {
		printLoaded(e, ps.Models)
	}
	if len(ps.References) > 0 {
		fmt.Fprintln(e.stdout, "\nchallenge references (layers loaded to check other peers' claims, not served):")
		printLoaded(e, ps.References)
	}
	if m := ps.Memory; m.MaxBytes > 0 {
		fmt.Fprintf(e.stdout, "memory: %s of %s serving budget used (%s)\n", size(m.UsedBytes), size(m.MaxBytes), m.Source)
	}
	return nil
}

// printLoaded is a table of loaded models.
func printLoaded(e *env, models []client.Loaded) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tSERVES\tMODEL\tLAYERS\tBACKEND\tWEIGHTS\tKV CACHE\tSESSIONS\tQUEUED\tSPEED\tBATCH")
	for _, m := range models {
		serves := strings.Join(m.Roles, ",")
		if serves == "" {
			serves = "-"
		}
		name := m.Name
		if name == "" {
			name = shortID(m.ModelCID) // a CID's end tells models apart as an ID's does peers
		}
		speed := "-"
		switch {
		case m.TokPerSec > 0:
			speed = fmt.Sprintf("%.1f tok/s", m.TokPerSec)
		case m.MsPerLayer > 0:
			speed = fmt.Sprintf("%.2f ms/layer", m.MsPerLayer)
		}
		batch := "isolated"
		if m.Batched {
			batch = "-"
			if m.Graphs > 0 {
				batch = fmt.Sprintf("%.2f steps/graph", float64(m.Steps)/float64(m.Graphs))
			}
		}
		backend, weights := m.Backend, size(m.WeightsBytes)
		if backend == "" {
			backend = "-" // a swarmd from before GPUs
		}
		if m.GPUWeightsBytes > 0 {
			weights += " + " + size(m.GPUWeightsBytes) + " GPU"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t[%d,%d)\t%s\t%s\t%s of %s\t%d/%d\t%d\t%s\t%s\n", m.Kind, serves, name, m.Start, m.End, backend,
			weights, size(m.KVBytes), size(int64(m.Slots)*m.KVPerSessionBytes), m.Sessions, m.Slots, m.Queued, speed, batch)
	}
	w.Flush()
}
