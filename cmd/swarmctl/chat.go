package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/cli"
)

const chatHelp = `Type a question and press Enter; the answer streams as it comes and the
conversation so far goes with every question.
  /mode auto|moa|speed|pipeline [MODEL]   how the swarm answers (pipeline: MODEL, or the
                                          one model live peers cover); a role name asks
                                          that role alone
  /trace on|off                           per-agent (or per-hop) lines as they come and
                                          token counts on stderr, as ask --trace
  /reset                                  forget the conversation
  /help                                   this text
  /quit                                   leave (so do Ctrl-D and /exit)
Ctrl-C stops the answer being written; a line starting with // sends one /.`

// chatCommand is one line typed at the chat prompt.
type chatCommand struct {
	name string // "" for a question; else mode, trace, reset, help, quit
	args []string
	text string // the question
}

// modeOK reports whether m is a mode the API takes: a strategy or a role
// name, refused here at once rather than at the next question.
func modeOK(m string) bool { return m != "" && answer.IsMode(m) }

// modesWanted lists the modes for an error that refuses one.
func modesWanted() string {
	return "want " + strings.Join(answer.Strategies, ", ") + " or a role (" + strings.Join(answer.Roles, ", ") + ")"
}

// parseChatLine reads one input line: a command, a question, or nothing
// (an empty line: ok with the zero command and no text).
func parseChatLine(line string) (chatCommand, error) {
	t := strings.TrimSpace(line)
	if strings.HasPrefix(t, "//") {
		return chatCommand{text: t[1:]}, nil
	}
	if !strings.HasPrefix(t, "/") {
		return chatCommand{text: t}, nil
	}
	f := strings.Fields(t)
	c := chatCommand{name: strings.ToLower(f[0][1:]), args: f[1:]}
	want := func(lo, hi int, form string) error {
		if len(c.args) < lo || len(c.args) > hi {
			return fmt.Errorf("usage: %s", form)
		}
		return nil
	}
	switch c.name {
	case "mode":
		if err := want(1, 2, "/mode auto|moa|speed|pipeline [MODEL]"); err != nil {
			return c, err
		}
		switch m := c.args[0]; {
		case !modeOK(m):
			return c, fmt.Errorf("/mode %q: %s", m, modesWanted())
		case len(c.args) == 2 && m != "pipeline":
			return c, fmt.Errorf("/mode %s takes no model (only pipeline does)", m)
		}
	case "trace":
		if err := want(1, 1, "/trace on|off"); err != nil {
			return c, err
		}
		if c.args[0] != "on" && c.args[0] != "off" {
			return c, fmt.Errorf("/trace %q: want on or off", c.args[0])
		}
	case "reset", "help", "quit":
		if err := want(0, 0, "/"+c.name); err != nil {
			return c, err
		}
	case "exit", "bye":
		c.name = "quit"
	default:
		return c, fmt.Errorf("unknown command /%s: /help lists them", c.name)
	}
	return c, nil
}

// chatSession is one conversation: the settings and the turns so far.
type chatSession struct {
	e           *env
	mode        string // auto, moa, speed, pipeline or a role
	model       string // pipeline: model name or CID
	trace       bool
	maxTokens   int
	temperature *float32 // nil: the API's default, greedy
	seed        *client.Seed
	history     []client.Message // completed turns: user, assistant, user, ...
}

// request is the query for a question: it, after the conversation so far.
func (s *chatSession) request(question string) client.QueryRequest {
	model := ""
	if s.mode == "pipeline" {
		model = s.model
	}
	return client.QueryRequest{Query: question, History: slices.Clone(s.history), Mode: s.mode, Model: model,
		MaxTokens: s.maxTokens, Temperature: s.temperature, Seed: s.seed, TimeoutMS: s.e.timeout.Milliseconds(), Stream: true}
}

// remember adds a finished turn to the history.
func (s *chatSession) remember(question, answer string) {
	s.history = append(s.history, client.Message{Role: "user", Content: question}, client.Message{Role: "assistant", Content: answer})
}

func runChat(ctx context.Context, e *env, args []string) error {
	fs := e.flags("chat")
	mode := fs.String("mode", "auto", "auto, moa, speed, pipeline, or a role name (change it with /mode)")
	model := fs.String("model", "", "pipeline mode: model name or CID")
	maxTokens := fs.Int("max-tokens", 0, "most tokens in each answer, 1..8192 (default 256)")
	temperature := fs.Float64("temperature", 0, "sampling temperature, 0..2 (default greedy)")
	seed := fs.String("seed", "", "sampling `SEED`, 0..18446744073709551615 (as X-Swarm-Seed prints it)")
	trace := fs.Bool("trace", false, "start with /trace on")
	pos, err := e.parse(fs, commands["chat"].args, args)
	if err != nil {
		return err
	}
	if err := noArgs("chat", pos); err != nil {
		return err
	}
	given := cli.Given(fs)
	switch {
	case given["max-tokens"] && (*maxTokens < 1 || *maxTokens > 8192):
		return usageError{fmt.Sprintf("--max-tokens %d: want 1..8192", *maxTokens)}
	case given["temperature"] && !(*temperature >= 0 && *temperature <= 2):
		return usageError{fmt.Sprintf("--temperature %v: want 0..2 (0 is greedy)", *temperature)}
	case e.timeout > 10*time.Minute:
		return usageError{fmt.Sprintf("--timeout %s: at most 10m", e.timeout)}
	case e.json:
		return usageError{"chat is interactive: --json is for ask"}
	}
	if !modeOK(*mode) {
		return usageError{fmt.Sprintf("--mode %q: %s", *mode, modesWanted())}
	}
	s := &chatSession{e: e, mode: *mode, model: *model, trace: *trace, maxTokens: *maxTokens}
	if given["temperature"] {
		t := float32(*temperature)
		s.temperature = &t
	}
	if s.seed, err = seedArg(given["seed"], *seed); err != nil {
		return err
	}
	if s.mode == "pipeline" && s.model == "" {
		m, err := s.pipelineModel(ctx)
		if err != nil {
			return err
		}
		s.model = m
	}
	intr := e.interrupt
	if intr == nil {
		// Ctrl-C stops the answer in flight, not swarmctl: chat takes
		// SIGINT over from main's context (SIGTERM still ends it).
		signal.Reset(os.Interrupt)
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt)
		defer signal.Stop(ch)
		intr = ch
	}
	return s.loop(ctx, e.stdin, intr)
}

// loop reads lines until /quit, end of input or ctx's end.
func (s *chatSession) loop(ctx context.Context, in io.Reader, intr <-chan os.Signal) error {
	e := s.e
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), maxPrompt)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	if e.stdinTTY {
		fmt.Fprintln(e.stderr, "swarm chat, mode "+s.mode+": /help for commands, Ctrl-D to leave.")
	}
	for {
		if e.stdinTTY {
			fmt.Fprint(e.stdout, ">>> ")
		}
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				if e.stdinTTY {
					fmt.Fprintln(e.stdout)
				}
				select {
				case err := <-readErr:
					if err != nil {
						return fmt.Errorf("reading the chat input: %w", err)
					}
				default:
				}
				return nil
			}
			line = l
		case <-intr:
			fmt.Fprintln(e.stdout)
			fmt.Fprintln(e.stderr, "(Ctrl-D or /quit leaves the chat)")
			continue
		case <-ctx.Done():
			return nil
		}
		c, err := parseChatLine(line)
		if err != nil {
			fmt.Fprintln(e.stderr, err)
			continue
		}
		if quit := s.do(ctx, c, intr); quit {
			return nil
		}
	}
}

// do carries out one line; it says whether the chat is over.
func (s *chatSession) do(ctx context.Context, c chatCommand, intr <-chan os.Signal) bool {
	e := s.e
	switch c.name {
	case "quit":
		return true
	case "help":
		fmt.Fprintln(e.stderr, chatHelp)
	case "reset":
		s.history = nil
		fmt.Fprintln(e.stderr, "(conversation forgotten)")
	case "trace":
		s.trace = c.args[0] == "on"
		fmt.Fprintf(e.stderr, "(trace %s)\n", c.args[0])
	case "mode":
		model := s.model
		if len(c.args) == 2 {
			model = c.args[1]
		}
		if c.args[0] == "pipeline" && model == "" {
			m, err := s.pipelineModel(ctx)
			if err != nil {
				fmt.Fprintln(e.stderr, err)
				return false
			}
			model = m
		}
		s.mode, s.model = c.args[0], model
		if s.mode == "pipeline" {
			fmt.Fprintf(e.stderr, "(mode pipeline, model %s)\n", s.model)
		} else {
			fmt.Fprintf(e.stderr, "(mode %s)\n", s.mode)
		}
	default:
		if c.text != "" {
			s.ask(ctx, c.text, intr)
		}
	}
	return false
}

// pipelineModel is the one model live peers cover whole, for /mode
// pipeline given no model.
func (s *chatSession) pipelineModel(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	sh, err := s.e.client.Shards(ctx)
	if err != nil {
		return "", fmt.Errorf("/mode pipeline: listing the swarm's models: %w", err)
	}
	var covered []string
	for _, m := range sh.Models {
		if m.Covered {
			covered = append(covered, m.Name)
		}
	}
	switch len(covered) {
	case 0:
		return "", errors.New("/mode pipeline: no model's layers are all held by live peers (swarmctl shards shows the gaps)")
	case 1:
		return covered[0], nil
	}
	return "", fmt.Errorf("/mode pipeline: say which model: %s", strings.Join(covered, ", "))
}

// ask sends a question with the conversation so far and streams the
// answer as ask does (with /trace on, its per-agent or per-hop lines as
// they come); a finished answer joins the history, a failed or stopped
// one does not.
func (s *chatSession) ask(ctx context.Context, question string, intr <-chan os.Signal) {
	e := s.e
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-intr:
			close(stopped)
			cancel()
		case <-done:
		}
	}()
	req := s.request(question)
	start := time.Now()
	res, err := e.streamQuery(ctx, req, s.trace, false)
	select {
	case <-stopped:
		fmt.Fprintln(e.stderr, "(answer stopped; it is not part of the conversation)")
		return
	default:
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "swarmctl:", e.explainAsk(err))
		return
	}
	s.remember(question, res.FinalAnswer)
	if !s.trace {
		// Quiet unless the answer is worth a warning: an agent left out,
		// cut off, or whose model this peer could not check.
		if degraded(res) {
			fmt.Fprintln(e.stderr, footer(res))
		}
		return
	}
	if err := e.queryFooter(res, true); err != nil {
		fmt.Fprintln(e.stderr, "swarmctl:", err)
	}
	fmt.Fprintln(e.stderr, chatSummary(req, res, time.Since(start)))
}

// degraded reports an MoA answer some agent failed, was cut short in, or
// gave unverified.
func degraded(res *answer.Result) bool {
	if res.Mode == "pipeline" {
		return false
	}
	if len(res.FailedAgents) > 0 {
		return true
	}
	for _, a := range res.AgentResponses {
		if a.Unverified || a.Partial {
			return true
		}
	}
	return false
}

// chatSummary is a traced turn's last line: the mode it was asked in, the
// messages sent (the history and the question) and the answer's tokens.
func chatSummary(req client.QueryRequest, res *answer.Result, took time.Duration) string {
	f := fmt.Sprintf("— %s: %s sent", req.Mode, plural(len(req.History)+1, "message"))
	if prompt, generated, ok := answerTokens(res); ok {
		f += fmt.Sprintf(", %d prompt + %d generated tokens", prompt, generated)
	}
	return f + ", " + took.Round(time.Millisecond).String()
}

// plural is "1 message", "3 messages".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// answerTokens are the prompt and generated tokens of whoever wrote the
// final answer: the pipeline, the aggregator, or the agent whose answer
// it is.
func answerTokens(res *answer.Result) (prompt, generated int, ok bool) {
	if res.Mode == "pipeline" {
		p, err := pipelineOf(res)
		if err != nil {
			return 0, 0, false
		}
		return p.PromptTokens, len(p.Tokens), true
	}
	if a := res.Aggregator; a != nil && a.Error == "" && a.Content == res.FinalAnswer {
		return a.Prompt, a.Tokens, true
	}
	for _, a := range res.AgentResponses {
		if a.Error == "" && a.Content == res.FinalAnswer {
			return a.Prompt, a.Tokens, true
		}
	}
	return 0, 0, false
}
