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

	"github.com/llmswarm/llmswarm/node/client"
)

// env is what every command gets: output streams and the global options,
// which may be given before or after the command name.
type env struct {
	stdout, stderr io.Writer
	api, token     string
	json           bool
	client         *client.Client
}

type command struct {
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

var commands = map[string]command{
	"ask":    {"ask the swarm a question (streams the answer)", runAsk},
	"bmc":    {"show the authoritative BMC table, its signer and age", runBMC},
	"bench":  {"measure MoA fan-out overhead or pipeline speed (bench moa|pipeline)", runBench},
	"id":     {"print this peer's ID and addresses", runID},
	"peers":  {"list the peers this one knows, alive and dead", runPeers},
	"plan":   {"recommend a placement of a model's layers on the live peers", runPlan},
	"shards": {"show who holds which layers of each model, and the gaps", runShards},
	"status": {"print the peer's status", runStatus},
}

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// errPrinted is a usage error the flag package already printed.
var errPrinted = usageError{""}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// flags returns a flag set holding the global options; commands add theirs.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {}
	fs.StringVar(&e.api, "api", e.api, "swarmd API `HOST:PORT` (env SWARM_API)")
	fs.StringVar(&e.token, "token", e.token, "API `TOKEN` (env SWARM_API_TOKEN)")
	fs.BoolVar(&e.json, "json", e.json, "print JSON instead of tables")
	return fs
}

// parse parses a command's flags and makes the client.
func (e *env) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(e.stdout, "Usage: swarmctl %s [flags]\n\nFlags:\n", fs.Name())
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return err
		}
		return errPrinted
	}
	e.client = client.New(e.api, e.token)
	return nil
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
	fmt.Fprint(w, "\nFlags (before or after COMMAND):\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, api: os.Getenv("SWARM_API"), token: os.Getenv("SWARM_API_TOKEN")}
	if e.api == "" {
		e.api = client.DefaultAddr
	}
	fs := e.flags("swarmctl")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return 0
		}
		fmt.Fprintln(stderr, "Run 'swarmctl -h' for usage.")
		return 2
	}
	if fs.NArg() == 0 {
		usage(stderr, fs)
		return 2
	}
	name := fs.Arg(0)
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "swarmctl: unknown command %q\nRun 'swarmctl -h' for usage.\n", name)
		return 2
	}
	return exitCode(stderr, cmd.run(ctx, e, fs.Args()[1:]))
}

func exitCode(stderr io.Writer, err error) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintln(stderr, "swarmctl:", ue.msg)
		}
		fmt.Fprintln(stderr, "Run 'swarmctl -h' for usage.")
		return 2
	default:
		fmt.Fprintln(stderr, "swarmctl:", err)
		return 1
	}
}

// noArgs is for commands that take no positional arguments.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("%s takes no arguments, got %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}
