package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/llmswarm/llmswarm/client"
)

func runShards(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "shards", args, func(ctx context.Context) error {
		sh, err := e.client.Shards(ctx)
		if err != nil {
			return err
		}
		return printShards(e, sh)
	})
}

func printShards(e *env, sh client.Shards) error {
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
	pos, err := e.parse(fs, commands["plan"].args, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError{"plan takes one model name or CID"}
	}
	model := ""
	if len(pos) == 1 {
		model = pos[0]
	}
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	p, err := e.client.Plan(ctx, model)
	if err != nil {
		return e.explain(ctx, err)
	}
	if e.json {
		return printJSON(e.stdout, p)
	}
	printPlan(e, p)
	return nil
}

// printPlan shows a plan: the model, the cost of its ends, the stages
// (with the ends' share of the first and last) and who is left out.
func printPlan(e *env, p client.Plan) {
	fmt.Fprintf(e.stdout, "%s  %s  %d layers of %s\n", p.Name, p.ModelCID, p.Layers, mib(p.LayerBytes))
	if p.HeadLayers > 0 || p.EmbedLayers > 0 {
		fmt.Fprintf(e.stdout, "output head: %.2f layers' time, %s on the last stage; embedding: %.4f layers' time, %s on the first\n",
			p.HeadLayers, mib(p.HeadBytes), p.EmbedLayers, mib(p.EmbedBytes))
	} else {
		fmt.Fprintln(e.stdout, "output head and embedding not counted: the model has no manifest to size them")
	}
	fmt.Fprintf(e.stdout, "recommended: %d stage(s), slowest stage %.2f ms/token, one token through the chain %.2f ms\n",
		len(p.Stages), p.BottleneckMS, p.LatencyMS)
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  PEER\tLAYERS\tSTAGE MS\tOF WHICH")
	for _, s := range p.Stages {
		var of []string
		if s.EmbedMS > 0 {
			of = append(of, fmt.Sprintf("embedding %.2f", s.EmbedMS))
		}
		if s.HeadMS > 0 {
			of = append(of, fmt.Sprintf("head %.2f", s.HeadMS))
		}
		fmt.Fprintf(w, "  %s\t[%d,%d)\t%.2f\t%s\n", shortID(s.PeerID), s.Start, s.End, s.StageMS, strings.Join(of, ", "))
	}
	w.Flush()
	for id, why := range p.Unused {
		fmt.Fprintf(e.stdout, "left out %s: %s\n", shortID(id), why)
	}
}
