package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/internal/cli"
)

const chatHelp = `Type a question and press Enter; the answer streams as it comes and the
conversation so far goes with every question.
  /mode auto|moa|speed|pipeline [MODEL]   how the swarm answers (pipeline: MODEL, or the
                                          one model live peers cover); a role name asks
                                          that role alone
  /trace on|off                           per-agent (or per-hop) lines and token counts on
                                          stderr; a traced answer comes whole, not streamed
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

// roleName is what /mode takes besides the four modes: the API answers
// an unknown role with its own clear error.
var roleName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

func modeOK(m string) bool {
	return m == "auto" || m == "moa" || m == "speed" || m == "pipeline" || roleName.MatchString(m)
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
			return c, fmt.Errorf("/mode %q: want auto, moa, speed, pipeline or a role name", m)
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
	temperature float32
	seed        *int64
	history     []chatMessage // completed turns: user, assistant, user, ...
}

// apiModel is the chat API's model field for the session's mode.
func (s *chatSession) apiModel() string {
	switch s.mode {
	case "auto":
		return "swarm"
	case "moa":
		return "swarm-moa"
	case "speed":
		return "swarm-speed"
	case "pipeline":
		return s.model
	}
	return s.mode
}

// request is the chat request for a question: the history, then it.
func (s *chatSession) request(question string) chatRequest {
	msgs := append(append(make([]chatMessage, 0, len(s.history)+1), s.history...), chatMessage{"user", question})
	t := s.temperature
	// The stream carries no per-agent results: a traced answer comes
	// whole, with the swarm's result, so that the trace is ask --trace's.
	return chatRequest{Model: s.apiModel(), Messages: msgs, MaxTokens: s.maxTokens, Temperature: &t, Seed: s.seed,
		Stream: !s.trace}
}

// remember adds a finished turn to the history.
func (s *chatSession) remember(question, answer string) {
	s.history = append(s.history, chatMessage{"user", question}, chatMessage{"assistant", answer})
}

func runChat(ctx context.Context, e *env, args []string) error {
	fs := e.flags("chat")
	mode := fs.String("mode", "auto", "auto, moa, speed, pipeline, or a role name (change it with /mode)")
	model := fs.String("model", "", "pipeline mode: model name or CID")
	maxTokens := fs.Int("max-tokens", 0, "most tokens in each answer, 1..8192 (default 256)")
	temperature := fs.Float64("temperature", 0, "sampling temperature, 0..2 (default greedy)")
	seed := fs.Int64("seed", 0, "sampling seed, at least 0")
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
	case given["seed"] && *seed < 0:
		return usageError{fmt.Sprintf("--seed %d: must not be negative", *seed)}
	case e.timeout > 10*time.Minute:
		return usageError{fmt.Sprintf("--timeout %s: at most 10m", e.timeout)}
	case e.json:
		return usageError{"chat is interactive: --json is for ask"}
	}
	if !modeOK(*mode) {
		return usageError{fmt.Sprintf("--mode %q: want auto, moa, speed, pipeline or a role name", *mode)}
	}
	s := &chatSession{e: e, mode: *mode, model: *model, trace: *trace, maxTokens: *maxTokens, temperature: float32(*temperature)}
	if given["seed"] {
		s.seed = seed
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
// answer; a finished answer joins the history, a failed or stopped one
// does not.
func (s *chatSession) ask(ctx context.Context, question string, intr <-chan os.Signal) {
	e := s.e
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if e.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
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
	wrote := false
	st := &chatStream{onText: func(t string) { fmt.Fprint(e.stdout, t); wrote = true }}
	err := chatCompletion(ctx, e.client.Addr(), e.token, req, st)
	if wrote {
		fmt.Fprintln(e.stdout)
	}
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
	s.remember(question, st.answer.String())
	if s.trace {
		if res := st.swarm; res != nil && res.Mode == "pipeline" {
			if err := pipelineFooter(e, res, true); err != nil {
				fmt.Fprintln(e.stderr, "swarmctl:", err)
			}
		} else if res != nil {
			for i := range res.AgentResponses {
				traceAgent(e, "agent", &res.AgentResponses[i])
			}
			for i := range res.FailedAgents {
				traceAgent(e, "agent", &res.FailedAgents[i])
			}
			if res.Aggregator != nil {
				traceAgent(e, "aggregator", res.Aggregator)
			}
			fmt.Fprintln(e.stderr, footer(res))
		}
		f := fmt.Sprintf("— %s: %d messages sent", req.Model, len(req.Messages))
		if u := st.usage; u != nil {
			f += fmt.Sprintf(", %d prompt + %d generated tokens", u.Prompt, u.Generated)
		}
		f += fmt.Sprintf(", %s, finish %s", time.Since(start).Round(time.Millisecond), st.finish)
		fmt.Fprintln(e.stderr, f)
	}
}
