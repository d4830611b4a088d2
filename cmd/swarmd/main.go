// Command swarmd runs one peer of the LLM swarm. Subcommands work on model
// files without starting a peer.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/llmswarm/llmswarm/internal/version"
)

const usage = `swarmd runs one peer of the LLM swarm.

Usage:
  swarmd [flags]                 run the peer (flags below; they may also come from --config FILE)
  swarmd model synth|info|slice  make, inspect and slice GGUF model files (swarmd model -h)
  swarmd bench --model FILE      measure prefill and decode speed (swarmd bench -h)
  swarmd version                 print the version
  swarmd help                    print this help

Exit codes: 0 ok, 1 runtime failure, 2 usage error.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit code: 0 ok, 1 failed,
// 2 usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if cmd, ok := subcommands[args[0]]; ok {
			return cmd(args[1:], stdout, stderr)
		}
		if args[0] == "help" {
			_, fs, _ := parseDaemonFlags(nil, stderr)
			printUsage(stdout, fs)
			return 0
		}
	}
	return runDaemon(args, stdout, stderr)
}

var subcommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"model":   runModel,
	"bench":   runBench,
	"version": runVersion,
}

// runVersion implements `swarmd version`; swarmctl version prints the same
// string for the same build.
func runVersion(args []string, stdout, stderr io.Writer) int {
	const cmd = "swarmd version"
	fs := newFlagSet(cmd, "", stdout, stderr)
	pos, code, done := parseFlags(fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageErr(stderr, cmd, "takes no arguments, got %q", pos[0])
	}
	fmt.Fprintln(stdout, "swarmd", version.String())
	return 0
}
