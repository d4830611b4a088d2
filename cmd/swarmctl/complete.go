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

// runComplete asks for a raw completion: a model continues the prompt as it
// is, with no chat template (a base model answers only so).
func runComplete(ctx context.Context, e *env, args []string) error {
	fs := e.flags("complete")
	role := fs.String("role", "", "the role whose model continues the text (default: the writer, or a pipeline model with --model or where no peer serves a role)")
	model := fs.String("model", "", "a pipeline model (name or CID), or with --role the model that role runs")
	maxTokens := fs.Int("max-tokens", 0, "most tokens in the continuation, 1..8192 (default 256)")
	temperature := fs.Float64("temperature", 0, "sampling temperature, 0..2 (default greedy)")
	seed := fs.String("seed", "", "sampling `SEED`, 0..18446744073709551615 (as X-Swarm-Seed prints it)")
	repeat := fs.Float64("repeat-penalty", 0, "penalise recently seen tokens, 0..10 (e.g. 1.1; default off)")
	trace := fs.Bool("trace", false, "show the agent's (or pipeline hop's) peer and timings on stderr")
	dtype := fs.String("dtype", "", "pipeline hidden states on the wire: f32 (default, identical to one machine) or f16 (half the bytes)")
	pos, err := e.parse(fs, commands["complete"].args, args)
	if err != nil {
		return err
	}
	given := cli.Given(fs)
	switch {
	case *role != "" && !slices.Contains(answer.Roles, *role):
		return usageError{fmt.Sprintf("--role %q: want one of %v", *role, answer.Roles)}
	case given["max-tokens"] && (*maxTokens < 1 || *maxTokens > 8192):
		return usageError{fmt.Sprintf("--max-tokens %d: want 1..8192", *maxTokens)}
	case given["temperature"] && !(*temperature >= 0 && *temperature <= 2):
		return usageError{fmt.Sprintf("--temperature %v: want 0..2 (0 is greedy)", *temperature)}
	case given["repeat-penalty"] && !(*repeat >= 0 && *repeat <= 10):
		return usageError{fmt.Sprintf("--repeat-penalty %v: want 0..10", *repeat)}
	case *dtype != "" && *dtype != "f16" && *dtype != "f32":
		return usageError{fmt.Sprintf("--dtype %q: want f16 or f32", *dtype)}
	case e.timeout > 10*time.Minute:
		return usageError{fmt.Sprintf("--timeout %s: at most 10m", e.timeout)}
	}
	sd, err := seedArg(given["seed"], *seed)
	if err != nil {
		return err
	}
	prompt, err := e.prompt(pos)
	if ue, ok := err.(usageError); ok {
		// ask's words for its question: this command's are a text.
		return usageError{strings.NewReplacer("swarmctl ask", "swarmctl complete", "ask", "complete", "question", "text").Replace(ue.msg)}
	}
	if err != nil {
		return err
	}
	req := client.QueryRequest{Query: prompt, Mode: answer.ModeComplete, Role: *role, Model: *model, MaxTokens: *maxTokens,
		DType: *dtype, TimeoutMS: e.timeout.Milliseconds(), Seed: sd}
	if given["temperature"] {
		t := float32(*temperature)
		req.Temperature = &t
	}
	if given["repeat-penalty"] {
		rp := float32(*repeat)
		req.RepeatPenalty = &rp
	}
	return e.answer(ctx, req, *trace, false)
}
