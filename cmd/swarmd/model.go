package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

const modelUsage = `usage: swarmd model <command> [flags]

commands:
  synth --arch qwen3|qwen2|llama --size tiny|small|0.6b --type f32|f16|q8_0|q4_k [--seed N] -o FILE
        write a random-weight GGUF with a valid tokenizer (deterministic from the seed)
  info [--json] FILE
        print a GGUF's metadata and CID
  slice FILE --layers A-B [-o OUT]
        write the stage file for layers [A,B) (default OUT: FILE with .layers-A-B.gguf)
`

// runModel implements `swarmd model ...`. It returns the exit code: 0 ok,
// 1 failure, 2 usage error.
func runModel(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, modelUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "synth":
		return modelSynth(args[1:], stdout, stderr)
	case "info":
		return modelInfo(args[1:], stdout, stderr)
	case "slice":
		return modelSlice(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "swarmd model: unknown command %q\n\n%s", args[0], modelUsage)
	return 2
}

// parseFlags parses flags that may come before or after positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func usageErr(stderr io.Writer, cmd, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", cmd, fmt.Sprintf(format, a...))
	return 2
}

func modelSynth(args []string, stdout, stderr io.Writer) int {
	const cmd = "swarmd model synth"
	fs := newFlagSet(cmd, stderr)
	arch := fs.String("arch", "qwen3", "architecture: "+strings.Join(engine.Architectures, " | "))
	size := fs.String("size", "tiny", "size: "+strings.Join(engine.SynthSizes, " | "))
	typ := fs.String("type", "f32", "weight type: "+strings.Join(engine.SynthTypes, " | "))
	seed := fs.Uint64("seed", 1, "random seed")
	out := fs.String("o", "", "output file (required)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return 2
	}
	switch {
	case len(pos) > 0:
		return usageErr(stderr, cmd, "unexpected argument %q", pos[0])
	case *out == "":
		return usageErr(stderr, cmd, "-o FILE is required")
	case !slices.Contains(engine.Architectures, *arch):
		return usageErr(stderr, cmd, "unknown --arch %q (want %s)", *arch, strings.Join(engine.Architectures, ", "))
	case !slices.Contains(engine.SynthSizes, *size):
		return usageErr(stderr, cmd, "unknown --size %q (want %s)", *size, strings.Join(engine.SynthSizes, ", "))
	case !slices.Contains(engine.SynthTypes, *typ):
		return usageErr(stderr, cmd, "unknown --type %q (want %s)", *typ, strings.Join(engine.SynthTypes, ", "))
	}
	spec := engine.SynthSpec{Arch: *arch, Size: *size, Type: *typ, Seed: *seed}
	if err := engine.Synth(context.Background(), *out, spec); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	mi, err := shards.ReadModelInfo(*out)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s: %s, %d layers, hidden %d, %s, %s of tensors\n", *out, mi.Arch, mi.Layers, mi.Hidden, mi.Quant, humanBytes(mi.TensorBytes))
	return 0
}

func modelInfo(args []string, stdout, stderr io.Writer) int {
	const cmd = "swarmd model info"
	fs := newFlagSet(cmd, stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		return usageErr(stderr, cmd, "want exactly one FILE, got %d arguments", len(pos))
	}
	path := pos[0]
	mi, err := shards.ReadModelInfo(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	c, err := shards.FileCID(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Path string `json:"path"`
			CID  string `json:"cid"`
			shards.ModelInfo
		}{path, c.String(), mi}); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return 1
		}
		return 0
	}
	w := func(k string, v any) { fmt.Fprintf(stdout, "%-15s %v\n", k+":", v) }
	w("file", path)
	w("cid", c)
	w("architecture", mi.Arch)
	w("name", mi.Name)
	w("quantization", mi.Quant)
	w("layers", mi.Layers)
	w("layer range", fmt.Sprintf("[%d,%d)", mi.LayerRange[0], mi.LayerRange[1]))
	w("embedding", mi.HasEmbedding)
	w("output head", mi.HasHead)
	w("hidden", mi.Hidden)
	w("heads", fmt.Sprintf("%d (kv %d)", mi.HeadCount, mi.HeadCountKV))
	w("context", mi.ContextLength)
	w("vocabulary", mi.VocabSize)
	w("tensor bytes", fmt.Sprintf("%d (%s)", mi.TensorBytes, humanBytes(mi.TensorBytes)))
	w("layer bytes", fmt.Sprintf("%d (%s, mean of one block)", mi.LayerBytes, humanBytes(mi.LayerBytes)))
	return 0
}

// parseLayers parses "A-B" (or "A:B") into [A,B).
func parseLayers(s string) (a, b int, err error) {
	x, y, ok := strings.Cut(s, "-")
	if !ok {
		x, y, ok = strings.Cut(s, ":")
	}
	if !ok {
		return 0, 0, fmt.Errorf("--layers %q: want A-B", s)
	}
	if a, err = strconv.Atoi(strings.TrimSpace(x)); err == nil {
		b, err = strconv.Atoi(strings.TrimSpace(y))
	}
	if err != nil || a < 0 || b <= a {
		return 0, 0, fmt.Errorf("--layers %q: want A-B with 0 <= A < B", s)
	}
	return a, b, nil
}

func modelSlice(args []string, stdout, stderr io.Writer) int {
	const cmd = "swarmd model slice"
	fs := newFlagSet(cmd, stderr)
	layers := fs.String("layers", "", "layer range A-B: layers [A,B) (required)")
	out := fs.String("o", "", "output file (default: FILE with .layers-A-B.gguf)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		return usageErr(stderr, cmd, "want exactly one FILE, got %d arguments", len(pos))
	}
	if *layers == "" {
		return usageErr(stderr, cmd, "--layers A-B is required")
	}
	a, b, err := parseLayers(*layers)
	if err != nil {
		return usageErr(stderr, cmd, "%v", err)
	}
	in := pos[0]
	if *out == "" {
		*out = strings.TrimSuffix(in, filepath.Ext(in)) + fmt.Sprintf(".layers-%d-%d.gguf", a, b)
	}
	mi, err := shards.Slice(in, *out, a, b)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		if errors.Is(err, shards.ErrLayerRange) {
			return 2
		}
		return 1
	}
	c, err := shards.FileCID(*out)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s: layers [%d,%d) of %d, embedding %v, head %v, %s, cid %s\n",
		*out, mi.LayerRange[0], mi.LayerRange[1], mi.Layers, mi.HasEmbedding, mi.HasHead, humanBytes(mi.TensorBytes), c)
	return 0
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
