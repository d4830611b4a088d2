package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
)

func runShards(ctx context.Context, e *env, args []string) error {
	fs := e.flags("shards")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	sh, err := e.client.Shards(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, sh)
	}
	if len(sh.Models) == 0 {
		fmt.Fprintln(e.stdout, "no peer announces any shard")
		return nil
	}
	for i, m := range sh.Models {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		cover := "covered"
		if !m.Covered {
			var gaps []string
			for _, g := range m.Gaps {
				gaps = append(gaps, fmt.Sprintf("[%d,%d)", g[0], g[1]))
			}
			cover = "NOT covered: layers " + strings.Join(gaps, ", ") + " held by no live peer"
		}
		fmt.Fprintf(e.stdout, "%s  %s  %d layers, %s\n", m.Name, m.ModelCID, m.Layers, cover)
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  PEER\tLAYERS\tSTATE\tMS/LAYER\tMEMORY")
		for _, h := range m.Holders {
			state := "alive"
			if !h.Alive {
				state = "dead"
			}
			fmt.Fprintf(w, "  %s\t[%d,%d)\t%s\t%.3f\t%s\n", shortID(h.PeerID), h.Start, h.End, state, h.MsPerLayer, mib(h.MemBytes))
		}
		w.Flush()
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func runPlan(ctx context.Context, e *env, args []string) error {
	fs := e.flags("plan")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageError{"plan takes one model name or CID"}
	}
	p, err := e.client.Plan(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, p)
	}
	fmt.Fprintf(e.stdout, "%s  %s  %d layers of %s\n", p.Name, p.ModelCID, p.Layers, mib(p.LayerBytes))
	fmt.Fprintf(e.stdout, "recommended: %d stage(s), slowest stage %.2f ms/token, one token through the chain %.2f ms\n",
		len(p.Stages), p.BottleneckMS, p.LatencyMS)
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  PEER\tLAYERS\tSTAGE MS")
	for _, s := range p.Stages {
		fmt.Fprintf(w, "  %s\t[%d,%d)\t%.2f\n", shortID(s.PeerID), s.Start, s.End, s.StageMS)
	}
	w.Flush()
	for id, why := range p.Unused {
		fmt.Fprintf(e.stdout, "left out %s: %s\n", shortID(id), why)
	}
	return nil
}
