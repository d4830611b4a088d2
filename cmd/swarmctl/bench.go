package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/cli"
)

// runBench measures the swarm through the local daemon's API.
//
//	swarmctl bench moa [--n 20] [--max-tokens 16] [PROMPT]
//	swarmctl bench pipeline [--n 5] [--max-tokens 64] [--model M] [--dtype f16] [--speculate] [PROMPT]
//	swarmctl bench streams [--streams 1,2,4,8] [--mode pipeline] [--n 3] [--max-tokens 64] [PROMPT]
func runBench(ctx context.Context, e *env, args []string) error {
	fs := e.flags("bench")
	n := fs.Int("n", 20, "queries to run")
	maxTokens := fs.Int("max-tokens", 16, "tokens per answer")
	model := fs.String("model", "", "pipeline: model name or CID")
	dtype := fs.String("dtype", "", "pipeline: f16 or f32 hidden states")
	conc := fs.Int("concurrency", 1, "pipeline: sequences generated at once (aggregate tok/s is reported)")
	streams := fs.String("streams", "1,2,4,8", "streams: concurrency levels, comma-separated")
	mode := fs.String("mode", "pipeline", "streams: the query mode (pipeline, or a mode one peer answers alone, e.g. a role)")
	speculate := fs.Bool("speculate", false, "pipeline: each generation plain and speculative (the daemon's pipeline.draft), side by side")
	pos, err := e.parse(fs, commands["bench"].args, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || (pos[0] != "moa" && pos[0] != "pipeline" && pos[0] != "streams") {
		return usageError{"bench needs a target: swarmctl bench moa|pipeline|streams [flags] [PROMPT]"}
	}
	what := pos[0]
	if *n < 1 || *n > 1000 {
		return usageError{fmt.Sprintf("--n %d: want 1..1000", *n)}
	}
	prompt := strings.Join(pos[1:], " ")
	if prompt == "" {
		prompt = "Who wrote Hamlet?"
	}
	if what == "moa" {
		return benchMoA(ctx, e, *n, *maxTokens, prompt)
	}
	if what == "streams" {
		levels, err := parseLevels(*streams)
		if err != nil {
			return err
		}
		given := cli.Given(fs)
		if !given["n"] {
			*n = 3
		}
		if !given["max-tokens"] {
			*maxTokens = 64
		}
		return benchStreams(ctx, e, levels, *n, *maxTokens, *mode, *model, *dtype, prompt)
	}
	if *conc < 1 || *conc > 64 {
		return usageError{fmt.Sprintf("--concurrency %d: want 1..64", *conc)}
	}
	if *conc > 1 {
		return benchConcurrent(ctx, e, *n, *conc, *maxTokens, *model, *dtype, prompt)
	}
	if *speculate {
		return benchSpeculate(ctx, e, *n, *maxTokens, *model, *dtype, prompt)
	}
	return benchPipeline(ctx, e, *n, *maxTokens, *model, *dtype, prompt)
}

// benchMoA: fan-out overhead = end-to-end latency (without the aggregation
// step) minus the slowest agent's own latency, per query; medians.
func benchMoA(ctx context.Context, e *env, n, maxTokens int, prompt string) error {
	var overhead, total, slowest []float64
	agents := 0
	for i := 0; i < n; i++ {
		res, err := e.client.Query(ctx, client.QueryRequest{Query: prompt, Mode: "moa", MaxTokens: maxTokens}, nil)
		if err != nil {
			return err
		}
		s := 0.0
		for _, a := range res.AgentResponses {
			s = max(s, a.ServerMS)
		}
		agg := 0.0
		if res.Aggregator != nil {
			agg = res.Aggregator.MS
		}
		total = append(total, res.TotalTimeMS)
		slowest = append(slowest, s)
		overhead = append(overhead, res.TotalTimeMS-agg-s)
		agents = res.AgentsResponded
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"queries": n, "agents": agents, "median_total_ms": med(total),
			"median_slowest_agent_ms": med(slowest), "median_fanout_overhead_ms": med(overhead), "overhead_ms": overhead})
	}
	fmt.Fprintf(e.stdout, "moa: %d queries, %d agents each, %d tokens per answer\n", n, agents, maxTokens)
	fmt.Fprintf(e.stdout, "  end-to-end        median %8.2f ms\n", med(total))
	fmt.Fprintf(e.stdout, "  slowest agent     median %8.2f ms (its own time)\n", med(slowest))
	fmt.Fprintf(e.stdout, "  fan-out overhead  median %8.2f ms (end-to-end - aggregation - slowest agent)\n", med(overhead))
	return nil
}

// benchPipeline reports decode speed and per-hop costs from the trace of
// pipeline queries.
func benchPipeline(ctx context.Context, e *env, n, maxTokens int, model, dtype, prompt string) error {
	var tps, ttft, parts []float64
	var hops []answer.HopStat
	var per [][]float64
	promptTokens := 0
	for i := 0; i < n; i++ {
		res, err := e.client.Query(ctx, client.QueryRequest{Query: prompt, Mode: "pipeline", Model: model, DType: dtype,
			MaxTokens: maxTokens}, nil)
		if err != nil {
			return err
		}
		g, err := pipelineOf(res)
		if err != nil {
			return err
		}
		tps = append(tps, g.DecodeTPS)
		ttft = append(ttft, g.TTFTMS)
		parts = append(parts, float64(g.PrefillParts))
		promptTokens = g.PromptTokens
		if len(per) == 0 {
			hops = g.Hops
			per = make([][]float64, 2*len(g.Hops))
		}
		for j, h := range g.Hops {
			if j < len(hops) {
				per[2*j] = append(per[2*j], h.ComputeMS)
				per[2*j+1] = append(per[2*j+1], h.TransferMS)
			}
		}
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"queries": n, "median_decode_tok_s": med(tps), "median_ttft_ms": med(ttft), "hops": hops,
			"prompt_tokens": promptTokens, "median_prefill_parts": med(parts)})
	}
	fmt.Fprintf(e.stdout, "pipeline: %d generations of %d tokens\n", n, maxTokens)
	fmt.Fprintf(e.stdout, "  decode            median %8.2f tok/s\n", med(tps))
	fmt.Fprintf(e.stdout, "  first token       median %8.2f ms (prompt of %d tokens, in %.0f parts)\n", med(ttft), promptTokens, med(parts))
	for j, h := range hops {
		fmt.Fprintf(e.stdout, "  hop %d %-12s [%d,%d)  compute %6.2f ms/token, transfer beyond compute %6.3f ms/token (medians)\n",
			j, shortID(h.Peer), h.Start, h.End, med(per[2*j]), med(per[2*j+1]))
	}
	return nil
}

func med(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchConcurrent runs rounds of conc pipeline generations at once and
// reports the aggregate decode rate: generated tokens / wall time per round.
func benchConcurrent(ctx context.Context, e *env, n, conc, maxTokens int, model, dtype, prompt string) error {
	var agg []float64
	for i := 0; i < n; i++ {
		start := time.Now()
		errs := make(chan error, conc)
		toks := make(chan int, conc)
		for j := 0; j < conc; j++ {
			go func() {
				res, err := e.client.Query(ctx, client.QueryRequest{Query: prompt, Mode: "pipeline", Model: model, DType: dtype,
					MaxTokens: maxTokens}, nil)
				if err != nil {
					errs <- err
					toks <- 0
					return
				}
				g, err := pipelineOf(res)
				errs <- err
				if err != nil {
					toks <- 0
					return
				}
				toks <- len(g.Tokens)
			}()
		}
		total := 0
		for j := 0; j < conc; j++ {
			if err := <-errs; err != nil {
				return err
			}
			total += <-toks
		}
		agg = append(agg, float64(total)/time.Since(start).Seconds())
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"rounds": n, "concurrency": conc, "median_aggregate_tok_s": med(agg)})
	}
	fmt.Fprintf(e.stdout, "pipeline: %d rounds of %d concurrent generations of %d tokens\n", n, conc, maxTokens)
	fmt.Fprintf(e.stdout, "  aggregate         median %8.2f tok/s (all sequences, prefill included)\n", med(agg))
	return nil
}
