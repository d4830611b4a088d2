package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/node/client"
)

func runAsk(ctx context.Context, e *env, args []string) error {
	fs := e.flags("ask")
	mode := fs.String("mode", "auto", "auto, moa, speed or pipeline")
	model := fs.String("model", "", "pipeline mode: model name or CID")
	maxTokens := fs.Int("max-tokens", 0, "most tokens in the answer (default 256)")
	temperature := fs.Float64("temperature", -1, "sampling temperature (default greedy)")
	seed := fs.Int64("seed", -1, "sampling seed")
	repeat := fs.Float64("repeat-penalty", 0, "penalise recently seen tokens (e.g. 1.1; default off)")
	timeout := fs.Duration("timeout", 0, "how long agents may take (default by query type: 6s simple, 12s complex, 8s speed)")
	trace := fs.Bool("trace", false, "show each agent's (or pipeline hop's) peer and timings on stderr")
	dtype := fs.String("dtype", "", "pipeline hidden states on the wire: f16 (default) or f32")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	prompt := strings.TrimSpace(strings.Join(fs.Args(), " "))
	if prompt == "" {
		return usageError{"ask needs a question: swarmctl ask \"...\""}
	}
	switch *mode {
	case "auto", "moa", "speed", "pipeline":
	default:
		return usageError{fmt.Sprintf("--mode %q: want auto, moa, speed or pipeline", *mode)}
	}
	if *maxTokens < 0 {
		return usageError{fmt.Sprintf("--max-tokens %d: must not be negative", *maxTokens)}
	}
	req := client.QueryRequest{Query: prompt, Mode: *mode, Model: *model, MaxTokens: *maxTokens, DType: *dtype,
		TimeoutMS: timeout.Milliseconds(), Stream: !e.json}
	if *temperature >= 0 {
		t := float32(*temperature)
		req.Temperature = &t
	}
	if *repeat != 0 {
		rp := float32(*repeat)
		req.RepeatPenalty = &rp
	}
	if *seed >= 0 {
		s := uint64(*seed)
		req.Seed = &s
	}
	if e.json {
		res, err := e.client.Query(ctx, req, nil)
		if err != nil {
			return err
		}
		return printJSON(e.stdout, res)
	}
	wrote := false
	res, err := e.client.Query(ctx, req, func(ev client.Event) {
		switch ev.Type {
		case "token":
			fmt.Fprint(e.stdout, ev.Text)
			wrote = wrote || ev.Text != ""
		case "agent":
			if *trace {
				traceAgent(e, "agent", ev.Agent)
			}
		case "trace":
			if *trace {
				tracePipelineEvent(e, ev.Raw)
			}
		}
	})
	if wrote {
		fmt.Fprintln(e.stdout)
	}
	if err != nil {
		return err
	}
	if !wrote && res.FinalAnswer != "" {
		fmt.Fprintln(e.stdout, res.FinalAnswer)
	}
	if *trace && res.Aggregator != nil {
		traceAgent(e, "aggregator", res.Aggregator)
	}
	if res.Mode == "pipeline" {
		return pipelineFooter(e, res, *trace)
	}
	fmt.Fprintln(e.stderr, footer(res))
	return nil
}

func traceAgent(e *env, kind string, a *client.AgentResponse) {
	if a.Error != "" {
		fmt.Fprintf(e.stderr, "%-10s %-11s %-12s failed after %s: %s\n", kind, a.Role, shortID(a.Peer), msDur(a.MS), a.Error)
		return
	}
	fmt.Fprintf(e.stderr, "%-10s %-11s %-12s %s: %d tokens, %.1f tok/s, first token %s, total %s, weight %.2f\n",
		kind, a.Role, shortID(a.Peer), a.Model, a.Tokens, a.TokPerSec, msDur(a.TTFTMS), msDur(a.MS), a.Weight)
}

// footer says who answered, so a degraded answer is visible as such.
func footer(res *client.QueryResult) string {
	var who []string
	for _, a := range res.AgentResponses {
		who = append(who, fmt.Sprintf("%s@%s", a.Role, shortID(a.Peer)))
	}
	s := fmt.Sprintf("— %s", res.Mode)
	if res.QueryType != "" {
		s += fmt.Sprintf(", %s (%s)", res.QueryType, res.Classifier)
	}
	s += fmt.Sprintf(", %d agent(s) answered in %s: %s", res.AgentsResponded, msDur(res.TotalTimeMS), strings.Join(who, ", "))
	if res.Aggregator != nil && res.Aggregator.Error == "" {
		s += fmt.Sprintf("; aggregated by %s", shortID(res.Aggregator.Peer))
	}
	for _, f := range res.FailedAgents {
		s += fmt.Sprintf("; %s@%s left out (%s)", f.Role, shortID(f.Peer), f.Error)
	}
	return s
}

func msDur(ms float64) string {
	return (time.Duration(ms * float64(time.Millisecond))).Round(time.Millisecond).String()
}
