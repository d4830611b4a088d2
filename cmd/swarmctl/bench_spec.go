package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmswarm/llmswarm/client"
)

// benchSpeculate runs each pipeline generation twice in turn, plain and
// speculative (drafted with the daemon's pipeline.draft), and reports
// both decode rates, their ratio and how many drafted tokens the routes
// accepted.
func benchSpeculate(ctx context.Context, e *env, n, maxTokens int, model, dtype, prompt string) error {
	zero := float32(0)
	var plain, spec []float64
	drafted, accepted, rounds := 0, 0, 0
	for i := 0; i < n; i++ {
		for _, on := range []bool{false, true} {
			res, err := e.client.Query(ctx, client.QueryRequest{Query: prompt, Mode: "pipeline", Model: model, DType: dtype,
				MaxTokens: maxTokens, Temperature: &zero, Speculate: &on}, nil)
			if err != nil {
				return err
			}
			g, err := pipelineOf(res)
			if err != nil {
				return err
			}
			if !on {
				plain = append(plain, g.DecodeTPS)
				continue
			}
			if g.DraftRounds == 0 {
				return errors.New("bench: the daemon did not draft (no pipeline.draft, a draft of another vocabulary, or a route that cannot verify: see its log)")
			}
			spec = append(spec, g.DecodeTPS)
			drafted, accepted, rounds = drafted+g.Drafted, accepted+g.DraftAccepted, rounds+g.DraftRounds
		}
	}
	ratio := 0.0
	if med(plain) > 0 {
		ratio = med(spec) / med(plain)
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"queries": n, "median_plain_tok_s": med(plain), "median_speculative_tok_s": med(spec),
			"ratio": ratio, "drafted": drafted, "draft_accepted": accepted, "draft_rounds": rounds})
	}
	fmt.Fprintf(e.stdout, "pipeline: %d generations of %d tokens each way, plain and speculative in turn\n", n, maxTokens)
	fmt.Fprintf(e.stdout, "  plain             median %8.2f tok/s\n", med(plain))
	fmt.Fprintf(e.stdout, "  speculative       median %8.2f tok/s  (%.2fx)\n", med(spec), ratio)
	fmt.Fprintf(e.stdout, "  drafts            %d of %d accepted, %d verify steps\n", accepted, drafted, rounds)
	return nil
}
