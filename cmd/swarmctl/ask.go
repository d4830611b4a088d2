package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/cli"
)

// maxPrompt bounds a prompt read from stdin (the API takes 512 KiB of text).
const maxPrompt = 512 << 10

func runAsk(ctx context.Context, e *env, args []string) error {
	fs := e.flags("ask")
	mode := fs.String("mode", "auto", "auto, moa, speed, pipeline, or a role name (that role alone answers)")
	model := fs.String("model", "", "pipeline mode: model name or CID")
	maxTokens := fs.Int("max-tokens", 0, "most tokens in the answer, 1..8192 (default 256)")
	temperature := fs.Float64("temperature", 0, "sampling temperature, 0..2 (default greedy)")
	seed := fs.String("seed", "", "sampling `SEED`, 0..18446744073709551615 (as X-Swarm-Seed prints it)")
	repeat := fs.Float64("repeat-penalty", 0, "penalise recently seen tokens, 0..10 (e.g. 1.1; default off)")
	trace := fs.Bool("trace", false, "show each agent's (or pipeline hop's) peer and timings on stderr")
	reasoning := fs.Bool("reasoning", false, "show the model's reasoning (GPT-OSS's analysis) on stderr, apart from the answer on stdout")
	dtype := fs.String("dtype", "", "pipeline hidden states on the wire: f32 (default, identical to one machine) or f16 (half the bytes)")
	standby := fs.Bool("standby", false, "pipeline: keep a warm standby route for instant failover (twice the compute; default: the daemon's pipeline.standby)")
	speculate := fs.Bool("speculate", false, "pipeline: draft with the daemon's pipeline.draft, several tokens per round trip (default: on when it has one)")
	pos, err := e.parse(fs, commands["ask"].args, args)
	if err != nil {
		return err
	}
	given := cli.Given(fs)
	switch {
	case !modeOK(*mode):
		return usageError{fmt.Sprintf("--mode %q: %s", *mode, modesWanted())}
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
	if err != nil {
		return err
	}
	req := client.QueryRequest{Query: prompt, Mode: *mode, Model: *model, MaxTokens: *maxTokens, DType: *dtype,
		TimeoutMS: e.timeout.Milliseconds(), Stream: !e.json}
	if given["temperature"] {
		t := float32(*temperature)
		req.Temperature = &t
	}
	if given["repeat-penalty"] {
		rp := float32(*repeat)
		req.RepeatPenalty = &rp
	}
	req.Seed = sd
	if given["standby"] {
		req.Standby = standby
	}
	if given["speculate"] {
		req.Speculate = speculate
	}
	return e.answer(ctx, req, *trace, *reasoning)
}

// answer sends a query and prints its answer: the whole result with
// --json, else the answer streamed and its footer; an answer cut short
// exits 3 (incomplete). With reasoning, the model's reasoning goes to
// stderr (the answer alone stays on stdout).
func (e *env) answer(ctx context.Context, req client.QueryRequest, trace, reasoning bool) error {
	if e.json {
		res, err := e.client.Query(ctx, req, nil)
		if err != nil {
			return e.explainAsk(err)
		}
		if err := printJSON(e.stdout, res); err != nil {
			return err
		}
		return incomplete(res)
	}
	res, err := e.streamQuery(ctx, req, trace, reasoning)
	if err != nil {
		return e.explainAsk(err)
	}
	if err := e.queryFooter(res, trace); err != nil {
		return err
	}
	return incomplete(res)
}

// incompleteError is an answer cut short (by its deadline, or by a peer
// that hung mid-answer): printed as far as it goes, and exit 3, so that a
// script does not take it for a whole one.
type incompleteError struct{ why string }

func (e incompleteError) Error() string { return "the answer is incomplete: " + e.why }

// incomplete is an incompleteError when the final answer was cut short,
// else nil. An agent cut off beside others that the aggregator combined
// (a peer that died mid-query) leaves a whole, if degraded, answer: the
// footer marks that agent, the exit status does not.
func incomplete(res *answer.Result) error {
	var why []string
	if a := finalAgent(res); a != nil && a.Partial {
		who := a.Role
		if a == res.Aggregator {
			who = "aggregator"
		}
		why = append(why, fmt.Sprintf("%s@%s %s", who, shortID(a.Peer), partialWhy(a)))
	}
	if p := res.Pipeline; p != nil && p.Done == "cancel" {
		why = append(why, "the pipeline was cut off by its deadline")
	}
	if len(why) == 0 {
		return nil
	}
	return incompleteError{strings.Join(why, "; ")}
}

// finalAgent is the answer res.FinalAnswer is: the aggregator's when it
// wrote it, else the agent whose answer was chosen; nil when none is.
func finalAgent(res *answer.Result) *answer.Agent {
	if a := res.Aggregator; a != nil && a.Error == "" && a.Content == res.FinalAnswer {
		return a
	}
	for i := range res.AgentResponses {
		if res.AgentResponses[i].Content == res.FinalAnswer {
			return &res.AgentResponses[i]
		}
	}
	return nil
}

func partialWhy(a *answer.Agent) string {
	if a.PartialReason != "" {
		return a.PartialReason
	}
	return "cut off"
}

// queryFooter says on stderr who answered (with trace, a pipeline's hops too).
func (e *env) queryFooter(res *answer.Result, trace bool) error {
	if res.Mode == "pipeline" {
		return pipelineFooter(e, res, trace)
	}
	fmt.Fprintln(e.stderr, footer(res))
	return nil
}

// streamQuery runs a streamed query: the answer goes to stdout as it
// comes (whole at the end when nothing streamed), the agents' progress to
// a terminal's stderr until then, and with trace each agent's (or
// pipeline hop's) line to stderr as it finishes, the aggregator's last.
// The footer is the caller's. With reasoning, the final answer's reasoning
// goes to stderr as it comes (whole, after the answer, when only the
// result holds it: a MoA answer from a peer older than the streaming of
// its reasoning).
func (e *env) streamQuery(ctx context.Context, req client.QueryRequest, trace, reasoning bool) (*answer.Result, error) {
	req.Stream = true
	wrote, thought := false, false
	var progress *agentProgress
	if e.stderrTTY {
		progress = newAgentProgress(e.stderr)
	}
	res, err := e.client.Query(ctx, req, func(ev client.Event) {
		switch ev.Type {
		case "agent_token":
			if progress != nil && !wrote {
				progress.add(ev.AgentToken)
			}
		case "token":
			if progress != nil {
				progress.clear()
			}
			if thought && !wrote {
				fmt.Fprintln(e.stderr)
			}
			fmt.Fprint(e.stdout, ev.Text)
			wrote = wrote || ev.Text != ""
		case "reasoning":
			if reasoning {
				if progress != nil {
					progress.clear()
				}
				fmt.Fprint(e.stderr, ev.Text)
				thought = thought || ev.Text != ""
			}
		case "agent":
			if trace {
				traceAgent(e, "agent", ev.Agent)
			}
		case "trace":
			if trace {
				tracePipelineEvent(e, ev.Trace)
			}
		}
	})
	if progress != nil {
		progress.clear()
	}
	if wrote {
		fmt.Fprintln(e.stdout)
	}
	if err != nil {
		return nil, err
	}
	if reasoning && !thought && res.Reasoning != "" {
		fmt.Fprintln(e.stderr, res.Reasoning)
	}
	if !wrote && res.FinalAnswer != "" {
		fmt.Fprintln(e.stdout, res.FinalAnswer)
	}
	if trace && res.Aggregator != nil {
		traceAgent(e, "aggregator", res.Aggregator)
	}
	return res, nil
}

// prompt is the question: the arguments, or stdin when the only argument
// is "-" or when there is none and stdin is not a terminal.
func (e *env) prompt(pos []string) (string, error) {
	fromStdin := len(pos) == 1 && pos[0] == "-" || len(pos) == 0 && !e.stdinTTY
	if !fromStdin {
		if slices.Contains(pos, "-") {
			return "", usageError{"ask: give the question as arguments or as - (stdin), not both"}
		}
		p := strings.TrimSpace(strings.Join(pos, " "))
		if p == "" {
			return "", usageError{"ask needs a question: swarmctl ask \"...\" (or - to read it from stdin)"}
		}
		return p, nil
	}
	b, err := io.ReadAll(io.LimitReader(e.stdin, maxPrompt+1))
	if err != nil {
		return "", fmt.Errorf("reading the question from stdin: %w", err)
	}
	if len(b) > maxPrompt {
		return "", usageError{fmt.Sprintf("ask: the question on stdin is over %d KiB", maxPrompt>>10)}
	}
	p := strings.TrimSpace(string(b))
	if p == "" {
		return "", usageError{"ask: stdin held no question"}
	}
	return p, nil
}

// explainAsk names the deadline behind a timeout the swarm reports.
func (e *env) explainAsk(err error) error {
	var ae *client.APIError
	if !errors.As(err, &ae) || !(ae.Status == http.StatusGatewayTimeout || ae.Type == string(answer.Timeout)) {
		return err
	}
	if e.timeout > 0 {
		return fmt.Errorf("the swarm did not answer within --timeout %s: %s", e.timeout, ae.Message)
	}
	return fmt.Errorf("the swarm did not answer within the deadline set in the originator's config (moa.*_timeout): %s", ae.Message)
}

func traceAgent(e *env, kind string, a *answer.Agent) {
	if a.Error != "" {
		fmt.Fprintf(e.stderr, "%-10s %-11s %-12s failed after %s: %s\n", kind, a.Role, shortID(a.Peer), msDur(a.MS), a.Error)
		return
	}
	conn := ""
	if a.Conn != "" {
		conn = ", " + a.Conn
	}
	fmt.Fprintf(e.stderr, "%-10s %-11s %-12s %s: %d tokens, %.1f tok/s, first token %s, total %s, weight %.2f%s%s%s\n",
		kind, a.Role, shortID(a.Peer), a.Model, a.Tokens, a.TokPerSec, msDur(a.TTFTMS), msDur(a.MS), a.Weight, conn, unverified(a), drafted(a))
}

// drafted says how a speculative speed-mode answer was drafted.
func drafted(a *answer.Agent) string {
	d := a.Draft
	if d == nil {
		return ""
	}
	s := fmt.Sprintf("; drafted by %s: %d of %d proposals accepted, %d verify steps", shortID(d.Peer), d.Accepted, d.Drafted, d.Rounds)
	if d.Error != "" {
		s += " (drafting stopped: " + d.Error + ")"
	}
	return s
}

// footer says who answered, so a degraded answer is visible as such.
func footer(res *answer.Result) string {
	var who []string
	for _, a := range res.AgentResponses {
		w := fmt.Sprintf("%s@%s%s", a.Role, shortID(a.Peer), unverified(&a))
		if a.Partial {
			w += " (partial: " + partialWhy(&a) + ")"
		}
		if a.Draft != nil {
			w += fmt.Sprintf(" drafted by %s (%d of %d accepted)", shortID(a.Draft.Peer), a.Draft.Accepted, a.Draft.Drafted)
		}
		who = append(who, w)
	}
	s := fmt.Sprintf("— %s", res.Mode)
	if res.QueryType != "" {
		s += fmt.Sprintf(", %s (%s)", res.QueryType, res.Classifier)
	}
	s += fmt.Sprintf(", %d agent(s) answered in %s: %s", res.AgentsResponded, msDur(res.TotalTimeMS), strings.Join(who, ", "))
	if res.Aggregator != nil && res.Aggregator.Error == "" {
		s += fmt.Sprintf("; aggregated by %s", shortID(res.Aggregator.Peer))
		if res.Aggregator.Partial {
			s += " (partial: " + partialWhy(res.Aggregator) + ")"
		}
	}
	for _, f := range res.FailedAgents {
		s += fmt.Sprintf("; %s@%s left out (%s)", f.Role, shortID(f.Peer), f.Error)
	}
	return s
}

// unverified marks an answer from a peer whose role the originator could
// not check.
func unverified(a *answer.Agent) string {
	if a.Unverified {
		return " (unverified)"
	}
	return ""
}

func msDur(ms float64) string {
	return (time.Duration(ms * float64(time.Millisecond))).Round(time.Millisecond).String()
}

// seedArg reads --seed: any seed X-Swarm-Seed prints, 0 to 2^64-1
// (client.ParseSeed); nil when not given.
func seedArg(given bool, s string) (*client.Seed, error) {
	if !given {
		return nil, nil
	}
	v, err := client.ParseSeed(s)
	if err != nil || strings.HasPrefix(s, "-") {
		return nil, usageError{fmt.Sprintf("--seed %s: want an integer 0..18446744073709551615 (as X-Swarm-Seed prints it)", s)}
	}
	return &v, nil
}
