package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/llmswarm/llmswarm/internal/cli"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

const modelUsage = `Usage: swarmd model COMMAND [flags] [args]

Commands:
  synth --arch ARCH --size SIZE --type f32|f16|q8_0|q4_k [--layers N] [--seed N] -o FILE
        write a random-weight GGUF with a valid tokenizer (deterministic from the seed);
        sizes: tiny and small (tests) for all; qwen3 0.6b 1.7b 4b 8b, qwen2 0.6b 1.5b 7b,
        llama 0.6b 1b 8b, gemma2 2b 9b, gemma3 1b 4b, mistral3 3b, olmo3 7b, qwen3moe 30b,
        gptoss 20b, llama4 109b, qwen3next 80b, nemotron_h 8b (real shapes); gemma3n
        tiny and small only; --layers keeps the first N layers of the shape
  info [--json] FILE
        print a GGUF's metadata and CID
  slice FILE --layers A-B [-o OUT]
        write the stage file for layers [A,B) of FILE, recording the model's CID
        (default OUT: FILE with .layers-A-B.gguf)

Run 'swarmd model COMMAND -h' for a command's flags.
`

// modelCommands are the commands of `swarmd model`.
var modelCommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"synth": modelSynth,
	"info":  modelInfo,
	"slice": modelSlice,
}

// runModel implements `swarmd model ...`. It returns the exit code: 0 ok,
// 1 failure, 2 usage error.
func runModel(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, modelUsage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, modelUsage)
		return 0
	}
	if cmd, ok := modelCommands[args[0]]; ok {
		return cmd(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "swarmd model: unknown command %q\n\n%s", args[0], modelUsage)
	return 2
}

// newFlagSet makes a subcommand's flag set. synopsis names its positional
// arguments; -h prints it with the flags to stdout.
func newFlagSet(name, synopsis string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: %s %s\n\nFlags:\n", name, synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	return fs
}

// parseFlags parses a subcommand's flags, which may come before or after
// its positional arguments ("--" ends them). done is set when the command
// must stop with exit code code: after -h (0) or a bad flag (2, already
// reported by the flag package).
func parseFlags(fs *flag.FlagSet, args []string) (pos []string, code int, done bool) {
	pos, err := cli.Parse(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, 0, true
	case err != nil:
		return nil, 2, true
	}
	return pos, 0, false
}

func usageErr(stderr io.Writer, cmd, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\nRun '%s -h' for usage.\n", cmd, fmt.Sprintf(format, a...), cmd)
	return 2
}

func modelSynth(args []string, stdout, stderr io.Writer) int {
	const cmd = "swarmd model synth"
	fs := newFlagSet(cmd, "[flags] -o FILE", stdout, stderr)
	arch := fs.String("arch", "qwen3", "architecture: "+strings.Join(engine.Architectures, " | "))
	size := fs.String("size", "tiny", "size: "+strings.Join(engine.SynthSizes, " | ")+" (not every arch has every size)")
	typ := fs.String("type", "f32", "weight type: "+strings.Join(engine.SynthTypes, " | "))
	seed := fs.Uint64("seed", 1, "random seed")
	layers := fs.Int("layers", 0, "write only the first `N` layers of the shape (0: all): a real shape's layers, fewer of them")
	template := fs.String("chat-template", "", "the file's tokenizer.chat_template: the Jinja text in `FILE`, or \"none\" for a base model served by raw completion only (default: the architecture's)")
	name := fs.String("name", "", "general.name of the file (default: synthetic-ARCH-SIZE-TYPE)")
	out := fs.String("o", "", "output `FILE` (required)")
	pos, code, done := parseFlags(fs, args)
	if done {
		return code
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
	case !slices.Contains(engine.SynthSizesFor(*arch), *size):
		return usageErr(stderr, cmd, "--size %q is not a %s size (want %s)", *size, *arch, strings.Join(engine.SynthSizesFor(*arch), ", "))
	case !slices.Contains(engine.SynthTypes, *typ):
		return usageErr(stderr, cmd, "unknown --type %q (want %s)", *typ, strings.Join(engine.SynthTypes, ", "))
	case *layers < 0:
		return usageErr(stderr, cmd, "--layers %d: want 0 (all) or a positive count", *layers)
	}
	spec := engine.SynthSpec{Arch: *arch, Size: *size, Type: *typ, Seed: *seed, Layers: *layers, Name: *name}
	switch *template {
	case "":
	case "none":
		spec.NoChatTemplate = true
	default:
		b, err := os.ReadFile(*template)
		if err != nil {
			return usageErr(stderr, cmd, "--chat-template: %v", err)
		}
		if len(b) == 0 {
			return usageErr(stderr, cmd, "--chat-template %s is empty (\"none\" writes no template)", *template)
		}
		spec.ChatTemplate = string(b)
	}
	bar := &cli.Progress{W: stderr, TTY: isTerminalWriter(stderr)}
	spec.Progress = func(done, total int64) { bar.Show("synth "+*out, done, total, true) }
	err := engine.Synth(context.Background(), *out, spec)
	bar.Done()
	if err != nil {
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
	fs := newFlagSet(cmd, "[--json] FILE", stdout, stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, done := parseFlags(fs, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return usageErr(stderr, cmd, "want exactly one FILE, got %d arguments", len(pos))
	}
	path := pos[0]
	g, err := shards.ReadGGUFFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	mi, source := g.ModelInfo(), g.String(shards.SourceCIDKey)
	fc, err := shards.FileCID(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	// A full model is named in the swarm by its root (the CID of its
	// manifest); a slice by its own file CID, and it records its model's root.
	c := fc.String()
	if mi.LayerRange == [2]int{0, mi.Layers} && mi.HasEmbedding && mi.HasHead {
		_, _, root, err := shards.BuildManifest(path)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return 1
		}
		c = root.String()
	}
	refused := engine.Refused(mi.Arch, mi.Layers)
	runs := slices.Contains(engine.Architectures, mi.Arch) && refused == ""
	chat := chatTemplateOf(path)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Path      string `json:"path"`
			CID       string `json:"cid"`
			FileCID   string `json:"file_cid"`
			SourceCID string `json:"source_cid,omitempty"`
			shards.ModelInfo
			Runs         bool                    `json:"runs"`                      // this engine runs the architecture
			Refused      string                  `json:"refused,omitempty"`         // why the engine refuses this model of an architecture it runs
			WholeOnly    string                  `json:"whole_file_only,omitempty"` // why stage slices of it cannot be loaded
			ChatTemplate engine.ChatTemplateInfo `json:"chat_template"`
		}{path, c, fc.String(), source, mi, runs, refused, engine.SliceRefused(mi.Arch), chat}); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return 1
		}
		return 0
	}
	w := func(k string, v any) { fmt.Fprintf(stdout, "%-15s %v\n", k+":", v) }
	w("file", path)
	if c != fc.String() {
		w("model cid", c)
	}
	w("file cid", fc)
	if source != "" {
		w("source model", source)
	}
	w("architecture", mi.Arch)
	switch why := engine.SliceRefused(mi.Arch); {
	case runs && why == "":
		w("engine", "runs it, whole or split by layers")
	case runs && engine.WholeOnly(mi.Arch) != "":
		w("engine", "runs it whole only, every layer on one machine: "+engine.WholeOnly(mi.Arch))
	case runs:
		w("engine", "runs it from the whole file only: "+why)
	case refused != "":
		w("engine", "does not run it: "+refused)
	default:
		w("engine", fmt.Sprintf("does not run %q (it runs %s)", mi.Arch, strings.Join(engine.Architectures, ", ")))
	}
	w("chat template", chatTemplateText(chat))
	if mi.Experts > 0 {
		w("experts", fmt.Sprintf("%d per expert layer, %d used per token (a stage holds them all)", mi.Experts, mi.ExpertsUsed))
	}
	w("name", mi.Name)
	w("quantization", mi.Quant)
	w("layers", mi.Layers)
	w("layer range", fmt.Sprintf("[%d,%d)", mi.LayerRange[0], mi.LayerRange[1]))
	w("embedding", mi.HasEmbedding)
	w("output head", mi.HasHead)
	w("hidden", mi.Hidden)
	if mi.AttentionLayers > 0 {
		w("heads", fmt.Sprintf("%d (kv %d) in %d of %d layers; the others have no attention and keep no KV cache",
			mi.HeadCount, mi.HeadCountKV, mi.AttentionLayers, mi.Layers))
	} else {
		w("heads", fmt.Sprintf("%d (kv %d)", mi.HeadCount, mi.HeadCountKV))
	}
	w("context", mi.ContextLength)
	w("vocabulary", mi.VocabSize)
	w("tensor bytes", fmt.Sprintf("%d (%s)", mi.TensorBytes, humanBytes(mi.TensorBytes)))
	w("layer bytes", fmt.Sprintf("%d (%s, mean of one block)", mi.LayerBytes, humanBytes(mi.LayerBytes)))
	return 0
}

// chatTemplateOf says how the engine would render conversations for the
// model at path (see engine.ChatTemplateInfo); a tokenizer it cannot read
// is said so in the note.
func chatTemplateOf(path string) engine.ChatTemplateInfo {
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		return engine.ChatTemplateInfo{Source: "none", Note: err.Error()}
	}
	return tok.ChatTemplate()
}

func chatTemplateText(c engine.ChatTemplateInfo) string {
	switch {
	case c.Source == "gguf":
		return "the file's own (Jinja)"
	case strings.HasPrefix(c.Source, "builtin:"):
		return fmt.Sprintf("hand-written %s, the file's not used: %s", strings.TrimPrefix(c.Source, "builtin:"), c.Note)
	}
	return "none: raw completion only (" + c.Note + ")"
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
	fs := newFlagSet(cmd, "FILE --layers A-B [-o OUT]", stdout, stderr)
	layers := fs.String("layers", "", "layer range `A-B`: layers [A,B) (required)")
	out := fs.String("o", "", "output `FILE` (default: FILE with .layers-A-B.gguf); never FILE itself")
	pos, code, done := parseFlags(fs, args)
	if done {
		return code
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
	mi, err := shards.SliceFile(in, *out, a, b)
	if err != nil {
		if errors.Is(err, shards.ErrLayerRange) || errors.Is(err, shards.ErrOverwriteInput) {
			return usageErr(stderr, cmd, "%v", err)
		}
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
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

// isTerminalWriter reports whether w is a terminal (a progress bar) rather
// than a pipe or a log (plain lines).
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && cli.IsTerminal(f)
}
