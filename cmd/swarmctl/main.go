// Command swarmctl talks to the local swarmd through its HTTP API. It
// links only the API client: no libp2p, no cgo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/cli"
)

// env is what every command gets: I/O and the global options, which may be
// given before or after the command name.
type env struct {
	stdin          io.Reader
	stdinTTY       bool // stdin is a terminal: ask does not read a prompt from it
	stderrTTY      bool // stderr is a terminal: ask shows the agents' progress there
	stdout, stderr io.Writer
	api, token     string
	json           bool
	timeout        time.Duration
	client         *client.Client
	// interrupt, when set, delivers Ctrl-C to chat in place of SIGINT.
	interrupt <-chan os.Signal
}

type command struct {
	args    string // positional arguments, for the usage line
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"ask":      {"PROMPT... | -", "ask the swarm a question (streams the answer; - or a pipe reads it from stdin)", runAsk},
		"complete": {"PROMPT... | -", "continue a text as it is, with no chat template (raw completion: a base model answers only so; --role or the writer, or a pipeline model)", runComplete},
		"chat":     {"", "chat with the swarm: history kept, answers streamed, /mode, /trace, /reset, /help, /quit", runChat},
		"bmc":      {"", "show the authoritative BMC table, its signer and age", runBMC},
		"bench":    {"moa|pipeline|streams [PROMPT...]", "measure MoA fan-out overhead, pipeline speed, or the concurrency curve (aggregate tok/s, p50/p95 per token at 1, 2, 4, 8 streams)", runBench},
		"help":     {"[COMMAND]", "print this help, or a command's", runHelp},
		"id":       {"", "print this peer's ID and addresses", runID},
		"invite":   {"", "print a join token for this peer's swarm (its key and this peer's addresses: a secret)", runInvite},
		"ledger":   {"", "show what this peer gave each peer and took from each (signed receipts), balances and standings", runLedger},
		"join":     {"TOKEN", "join the swarm of a token from swarmctl invite (the peer restarts its network with the new key)", runJoin},
		"peers":    {"", "list the peers this one knows, alive and dead", runPeers},
		"plan":     {"[MODEL]", "recommend a placement of a model's layers on the live peers", runPlan},
		"pull":     {"MODEL", "fetch a GGUF from Hugging Face into the peer (hf.co/OWNER/REPO:QUANT, or qwen3:0.6b...), resumable, sha256-checked, announced to peers", runPull},
		"ps":       {"", "list the models the peer has loaded: memory, KV cache, sessions, queue", runPS},
		"role":     {"add ROLE PATH.gguf | rm ROLE", "serve a Mixture-of-Agents role, or stop serving it, without a restart", runRole},
		"shard":    {"add PATH.gguf:A-B|MODEL:A-B | rm MODEL_CID:A-B", "serve layers of a model, or stop serving them, without a restart", runShard},
		"shards":   {"", "show who holds which layers of each model, and the gaps", runShards},
		"status":   {"", "print the peer's status and health warnings", runStatus},
		"version":  {"", "print swarmctl's version (swarmd version prints the same for the same build)", runVersion},
	}
}

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// errPrinted is a usage error the flag package already printed.
var errPrinted = usageError{""}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := &env{stdin: os.Stdin, stdinTTY: cli.IsTerminal(os.Stdin), stderrTTY: cli.IsTerminal(os.Stderr),
		stdout: os.Stdout, stderr: os.Stderr}
	code := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(code)
}

// defaultWait bounds commands other than ask when --timeout is not given.
const defaultWait = 30 * time.Second

// flags returns a flag set holding the global options; commands add theirs.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {}
	fs.StringVar(&e.api, "api", e.api, "swarmd API `HOST:PORT` or http://HOST:PORT (env SWARM_API)")
	fs.StringVar(&e.token, "token", e.token, "API `TOKEN` (env SWARM_API_TOKEN)")
	fs.BoolVar(&e.json, "json", e.json, "print JSON instead of tables")
	fs.DurationVar(&e.timeout, "timeout", e.timeout, "give up after this long (default 30s; ask: the deadline for the whole answer, default none: agents run as long as their devices need, hung ones are dropped)")
	return fs
}

// parse parses a command's flags, which may come before, between or after
// its positional arguments ("--" ends them), checks the API address and
// makes the client. synopsis names the positional arguments for -h.
func (e *env) parse(fs *flag.FlagSet, synopsis string, args []string) ([]string, error) {
	pos, err := cli.Parse(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(e.stdout, "Usage: swarmctl %s [flags] %s\n\nFlags:\n", fs.Name(), synopsis)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, errPrinted
	}
	if e.timeout < 0 {
		return nil, usageError{fmt.Sprintf("--timeout %s: must not be negative", e.timeout)}
	}
	if err := checkAPIAddr(e.api); err != nil {
		return nil, err
	}
	e.client = client.New(e.api, e.token)
	return pos, nil
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, "swarmctl talks to the local swarmd.\n\nUsage: swarmctl [flags] COMMAND [flags] [args]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, "\nFlags (before or after COMMAND; -- ends them):\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nRun 'swarmctl COMMAND -h' for a command's arguments and flags.\nExit codes: 0 ok, 1 failure, 2 usage error, 3 answer incomplete (ask).\n")
}

func run(ctx context.Context, e *env, args []string) int {
	e.api, e.token = os.Getenv("SWARM_API"), os.Getenv("SWARM_API_TOKEN")
	if e.api == "" {
		e.api = client.DefaultAddr
	}
	fs := e.flags("swarmctl")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(e.stdout, fs)
			return 0
		}
		fmt.Fprintln(e.stderr, "Run 'swarmctl -h' for usage.")
		return 2
	}
	if fs.NArg() == 0 {
		usage(e.stderr, fs)
		return 2
	}
	name := fs.Arg(0)
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(e.stderr, "swarmctl: unknown command %q\nRun 'swarmctl -h' for usage.\n", name)
		return 2
	}
	return exitCode(e.stderr, name, cmd.run(ctx, e, fs.Args()[1:]))
}

// exitCode reports err and picks the exit status; a usage error points at
// the help of the command that refused it (name).
func exitCode(stderr io.Writer, name string, err error) int {
	var ue usageError
	var ie incompleteError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ie):
		fmt.Fprintln(stderr, "swarmctl:", err)
		return 3
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintln(stderr, "swarmctl:", ue.msg)
		}
		help := "swarmctl -h"
		if name != "" && name != "help" {
			help = "swarmctl " + name + " -h"
		}
		fmt.Fprintf(stderr, "Run '%s' for usage.\n", help)
		return 2
	default:
		fmt.Fprintln(stderr, "swarmctl:", err)
		return 1
	}
}

// noArgs is for commands that take no positional arguments.
func noArgs(name string, pos []string) error {
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("%s takes no arguments, got %q", name, pos[0])}
	}
	return nil
}

// simple runs a command that takes no arguments and makes one bounded call.
func simple(ctx context.Context, e *env, name string, args []string, call func(ctx context.Context) error) error {
	fs := e.flags(name)
	pos, err := e.parse(fs, "", args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	return e.explain(ctx, call(ctx))
}

// bounded gives a command that is not ask its deadline: --timeout, or 30 s.
func (e *env) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.wait())
}

func (e *env) wait() time.Duration {
	if e.timeout > 0 {
		return e.timeout
	}
	return defaultWait
}

// explain turns the expiry of swarmctl's own deadline into an error that
// names it, instead of a bare "context deadline exceeded".
func (e *env) explain(ctx context.Context, err error) error {
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("timed out after %s waiting for swarmd at %s (--timeout %s)", e.wait(), e.client.Addr(), e.wait())
	}
	return err
}

func runHelp(ctx context.Context, e *env, args []string) error {
	fs := e.flags("help")
	pos, err := e.parse(fs, commands["help"].args, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		usage(e.stdout, fs)
		return nil
	case len(pos) > 1:
		return usageError{"help takes one command name"}
	}
	cmd, ok := commands[pos[0]]
	if !ok || pos[0] == "help" {
		return usageError{fmt.Sprintf("help: unknown command %q", pos[0])}
	}
	return cmd.run(ctx, e, []string{"-h"})
}
