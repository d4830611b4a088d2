// Command swarmd runs one peer of the LLM swarm. Subcommands work on model
// files without starting a peer.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `swarmd runs one peer of the LLM swarm.

Usage:
  swarmd [flags]                 run the peer (see swarmd -h for flags)
  swarmd model synth|info|slice  make, inspect and slice GGUF model files
  swarmd bench --model FILE      measure prefill and decode speed
  swarmd version                 print the version
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
			fmt.Fprint(stdout, usage)
			return 0
		}
	}
	return runDaemon(args, stdout, stderr)
}

var subcommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"model": runModel,
	"bench": runBench,
	"version": func(args []string, stdout, stderr io.Writer) int {
		fmt.Fprintln(stdout, "swarmd", version())
		return 0
	},
}
