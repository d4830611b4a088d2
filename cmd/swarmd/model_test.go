package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

func runCmd(f func([]string, *bytes.Buffer, *bytes.Buffer) int, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := f(args, &out, &errb)
	return code, out.String(), errb.String()
}

func modelCmd(args []string, o, e *bytes.Buffer) int { return runModel(args, o, e) }
func benchCmd(args []string, o, e *bytes.Buffer) int { return runBench(args, o, e) }

func TestModelCommands(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "tiny.gguf")
	code, out, errs := runCmd(modelCmd, "synth", "--arch", "llama", "--size", "tiny", "--type", "q8_0", "--seed", "3", "-o", full)
	if code != 0 {
		t.Fatalf("synth: %d %s", code, errs)
	}
	if !strings.Contains(out, "llama") {
		t.Fatalf("synth output %q", out)
	}
	// Progress off a terminal: plain lines on stderr, the last at 100%.
	if lines := strings.Split(strings.TrimSpace(errs), "\n"); len(lines) < 2 || !strings.Contains(lines[len(lines)-1], "synth "+full+" 100%") || strings.Contains(errs, "\r") {
		t.Fatalf("synth progress %q", errs)
	}
	code, out, errs = runCmd(modelCmd, "info", full)
	if code != 0 || !strings.Contains(out, "cid:") || !strings.Contains(out, "bafk") || !strings.Contains(out, "[0,4)") ||
		!strings.Contains(out, "engine:         runs it, whole or split by layers") ||
		!strings.Contains(out, "chat template:  the file's own (Jinja)") {
		t.Fatalf("info: %d %q %s", code, out, errs)
	}
	code, out, errs = runCmd(modelCmd, "slice", full, "--layers", "1-3")
	if code != 0 {
		t.Fatalf("slice: %d %s", code, errs)
	}
	sliced := filepath.Join(dir, "tiny.layers-1-3.gguf")
	if !strings.Contains(out, sliced) {
		t.Fatalf("slice output %q", out)
	}
	code, out, errs = runCmd(modelCmd, "info", "--json", sliced)
	if code != 0 {
		t.Fatalf("info --json: %d %s", code, errs)
	}
	var v struct {
		CID        string `json:"cid"`
		SourceCID  string `json:"source_cid"`
		LayerRange [2]int `json:"layer_range"`
		Layers     int    `json:"layers"`
		Runs       bool   `json:"runs"`
		Chat       struct {
			Source string `json:"source"`
		} `json:"chat_template"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.LayerRange != [2]int{1, 3} || v.Layers != 4 || v.CID == "" ||
		!v.Runs || v.Chat.Source != "gguf" {
		t.Fatalf("info json %q: %v %+v", out, err, v)
	}
	if _, _, full, _ := shards.BuildManifest(full); v.SourceCID != full.String() {
		t.Fatalf("slice's source_cid %q, want the model's CID %s", v.SourceCID, full)
	}

	empty := filepath.Join(dir, "empty.jinja")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// a base model: no template, a name of its own
	base := filepath.Join(dir, "base.gguf")
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "llama", "--chat-template", "none", "--name", "my-base", "-o", base); code != 0 {
		t.Fatalf("synth base: %d %s", code, errs)
	}
	if code, out, errs := runCmd(modelCmd, "info", base); code != 0 || !strings.Contains(out, "chat template:  none: raw completion only") || !strings.Contains(out, "my-base") {
		t.Fatalf("info of a base model: %d %q %s", code, out, errs)
	}

	usage := []struct {
		args []string
		want string
	}{
		{nil, "Usage: swarmd model COMMAND"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"synth", "--arch", "gpt9", "-o", "x"}, "unknown --arch"},
		{[]string{"synth", "--size", "huge", "-o", "x"}, "unknown --size"},
		{[]string{"synth", "--arch", "qwen2", "--size", "8b", "-o", "x"}, `--size "8b" is not a qwen2 size (want tiny, small, 0.6b, 1.5b, 7b)`},
		{[]string{"synth"}, "-o FILE is required"},
		{[]string{"synth", "--bogus"}, "flag provided but not defined"},
		{[]string{"synth", "--layers", "-1", "-o", "x"}, "--layers -1: want 0 (all) or a positive count"},
		{[]string{"synth", "--chat-template", filepath.Join(dir, "missing.jinja"), "-o", "x"}, "--chat-template: open"},
		{[]string{"synth", "--chat-template", empty, "-o", "x"}, "is empty"},
		{[]string{"info"}, "exactly one FILE"},
		{[]string{"slice", full}, "--layers A-B is required"},
		{[]string{"slice", full, "--layers", "3-1"}, "0 <= A < B"},
		{[]string{"slice", full, "--layers", "x"}, "want A-B"},
		{[]string{"slice", sliced, "--layers", "0-2", "-o", filepath.Join(dir, "bad.gguf")}, "file holds layers [1,3)"},
	}
	for _, u := range usage {
		code, _, errs := runCmd(modelCmd, u.args...)
		if code != 2 || !strings.Contains(errs, u.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", u.args, code, errs, u.want)
		}
	}
	// --layers: a real shape's first N layers; more than it has is refused
	fewer := filepath.Join(dir, "moe-3.gguf")
	if code, out, errs := runCmd(modelCmd, "synth", "--arch", "qwen3moe", "--size", "small", "--layers", "3", "-o", fewer); code != 0 || !strings.Contains(out, "qwen3moe, 3 layers, hidden 256") {
		t.Fatalf("synth --layers 3: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "qwen3moe", "--size", "small", "--layers", "9", "-o", fewer); code != 1 || !strings.Contains(errs, "synth layers 9 for qwen3moe small (1..8, or 0 for all)") {
		t.Errorf("synth --layers 9 of 8: exit %d, %q", code, errs)
	}
	code, _, errs = runCmd(modelCmd, "info", filepath.Join(dir, "missing.gguf"))
	if code != 1 || !strings.Contains(errs, "missing.gguf") {
		t.Errorf("info missing: %d %q", code, errs)
	}
}

func TestBenchCommand(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "qwen3", "-o", p); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := runCmd(benchCmd, "--model", p, "--threads", "1", "--prompt", "8", "--gen", "4", "--reps", "1")
	if code != 0 || !strings.Contains(out, "prefill:") || !strings.Contains(out, "decode:") {
		t.Fatalf("bench: %d %q %s", code, out, errs)
	}
	t.Log(out)
	if code, _, errs := runCmd(benchCmd, "--threads", "2"); code != 2 || !strings.Contains(errs, "--model FILE is required") {
		t.Errorf("bench without model: %d %q", code, errs)
	}
	if code, _, errs := runCmd(benchCmd, "--model", p+".none"); code != 1 || !strings.Contains(errs, ".none") {
		t.Errorf("bench missing file: %d %q", code, errs)
	}
}

// TestModelSliceRefusesToOverwriteInput: "slice IN -o IN" used to truncate
// IN before reading it. Every way of naming the input is a usage error that
// leaves it intact.
func TestModelSliceRefusesToOverwriteInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.gguf")
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "qwen3", "-o", in); code != 0 {
		t.Fatal(errs)
	}
	before, err := shards.FileCID(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(in, filepath.Join(dir, "link.gguf")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, out := range []string{in, "m.gguf", "./m.gguf", "link.gguf", "../" + filepath.Base(dir) + "/m.gguf"} {
		code, _, errs := runCmd(modelCmd, "slice", in, "--layers", "0-2", "-o", out)
		if code != 2 || !strings.Contains(errs, "output file is the input") {
			t.Errorf("slice -o %s: exit %d, stderr %q; want 2 and a refusal", out, code, errs)
		}
	}
	after, err := shards.FileCID(in)
	if err != nil || after != before {
		t.Fatalf("input changed: %v, CID %s -> %s", err, before, after)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("%d files in the dir, want the model and the link (no temp files)", len(ents))
	}
}

// TestModelInfoJSONKeys: every key of "model info --json" is snake_case.
func TestModelInfoJSONKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "llama", "-o", p); code != 0 {
		t.Fatal(errs)
	}
	sl := strings.TrimSuffix(p, ".gguf") + ".s.gguf"
	if code, _, errs := runCmd(modelCmd, "slice", p, "--layers", "1-2", "-o", sl); code != 0 {
		t.Fatal(errs)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for _, f := range []string{p, sl} {
		code, out, errs := runCmd(modelCmd, "info", "--json", f)
		if code != 0 {
			t.Fatalf("info --json %s: %d %s", f, code, errs)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"cid", "layer_range", "has_embedding", "tensor_bytes"} {
			if _, ok := m[want]; !ok {
				t.Errorf("%s: no key %q in %s", f, want, out)
			}
		}
		for k := range m {
			if !snake.MatchString(k) {
				t.Errorf("%s: key %q is not snake_case", f, k)
			}
		}
	}
}

// TestModelInfoLFM2Splits: an LFM2 model, whose stage slices ollama's own
// loader refuses and the engine builds itself, is said to run whole or
// split by layers, with no whole-file-only reason; LFM2-MoE's shows its
// experts.
func TestModelInfoLFM2Splits(t *testing.T) {
	for _, arch := range []string{"lfm2", "lfm2moe"} {
		full := filepath.Join(t.TempDir(), arch+".gguf")
		if code, _, errs := runCmd(modelCmd, "synth", "--arch", arch, "--size", "tiny", "--type", "q8_0", "-o", full); code != 0 {
			t.Fatalf("synth: %d %s", code, errs)
		}
		code, out, errs := runCmd(modelCmd, "info", full)
		if code != 0 || !strings.Contains(out, "engine:         runs it, whole or split by layers") {
			t.Fatalf("%s info: %d %q %s", arch, code, out, errs)
		}
		if experts := strings.Contains(out, "experts:        4 per expert layer, 2 used per token"); experts != (arch == "lfm2moe") {
			t.Errorf("%s info: experts line %v: %q", arch, experts, out)
		}
		code, out, errs = runCmd(modelCmd, "info", "--json", full)
		var v struct {
			Runs      bool    `json:"runs"`
			WholeOnly *string `json:"whole_file_only"`
		}
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || !v.Runs || v.WholeOnly != nil {
			t.Fatalf("%s info --json: %d %v %q %s", arch, code, err, out, errs)
		}
	}
}

// TestModelInfoLlama4: a Llama 4 file is run whole or split by layers,
// its experts listed (only some of its layers hold them).
func TestModelInfoLlama4(t *testing.T) {
	full := filepath.Join(t.TempDir(), "llama4.gguf")
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "llama4", "--size", "tiny", "--type", "q8_0", "-o", full); code != 0 {
		t.Fatalf("synth: %d %s", code, errs)
	}
	code, out, errs := runCmd(modelCmd, "info", full)
	for _, want := range []string{"architecture:   llama4", "engine:         runs it, whole or split by layers",
		"experts:        4 per expert layer, 1 used per token", "chat template:  the file's own (Jinja)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("info: %d, no %q in %q %s", code, want, out, errs)
		}
	}
}

// TestModelInfoQwen3Next: a Qwen3-Next file is run whole or split by
// layers, its experts listed (every layer holds them).
func TestModelInfoQwen3Next(t *testing.T) {
	full := filepath.Join(t.TempDir(), "qwen3next.gguf")
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "qwen3next", "--size", "tiny", "--type", "q8_0", "-o", full); code != 0 {
		t.Fatalf("synth: %d %s", code, errs)
	}
	code, out, errs := runCmd(modelCmd, "info", full)
	for _, want := range []string{"architecture:   qwen3next", "engine:         runs it, whole or split by layers",
		"experts:        4 per expert layer, 2 used per token", "chat template:  the file's own (Jinja)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("info: %d, no %q in %q %s", code, want, out, errs)
		}
	}
}

// TestModelInfoGemma3n: a Gemma 3n file is said to run whole only, on one
// machine, with the reason; its JSON names why its slices are refused.
func TestModelInfoGemma3n(t *testing.T) {
	full := filepath.Join(t.TempDir(), "gemma3n.gguf")
	if code, _, errs := runCmd(modelCmd, "synth", "--arch", "gemma3n", "--size", "tiny", "--type", "q8_0", "-o", full); code != 0 {
		t.Fatalf("synth: %d %s", code, errs)
	}
	code, out, errs := runCmd(modelCmd, "info", full)
	for _, want := range []string{"architecture:   gemma3n", "engine:         runs it whole only, every layer on one machine: gemma3n's residual stream is altup.num_inputs streams",
		"chat template:  the file's own (Jinja)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("info: %d, no %q in %q %s", code, want, out, errs)
		}
	}
	code, out, errs = runCmd(modelCmd, "info", "--json", full)
	var v struct {
		Runs      bool   `json:"runs"`
		WholeOnly string `json:"whole_file_only"`
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || !v.Runs || !strings.Contains(v.WholeOnly, "runs whole only") {
		t.Fatalf("info --json: %d %v %q %s", code, err, out, errs)
	}
}

// TestModelInfoNemotronH: a Nemotron-H file is run whole or split by
// layers; nemotron_h has no experts, nemotron_h_moe's are listed.
func TestModelInfoNemotronH(t *testing.T) {
	for _, arch := range []string{"nemotron_h", "nemotron_h_moe"} {
		full := filepath.Join(t.TempDir(), arch+".gguf")
		if code, _, errs := runCmd(modelCmd, "synth", "--arch", arch, "--size", "tiny", "--type", "q8_0", "-o", full); code != 0 {
			t.Fatalf("synth: %d %s", code, errs)
		}
		code, out, errs := runCmd(modelCmd, "info", full)
		for _, want := range []string{"architecture:   " + arch + "\n", "engine:         runs it, whole or split by layers",
			"layers:         4", "chat template:  the file's own (Jinja)"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("info: %d, no %q in %q %s", code, want, out, errs)
			}
		}
		if experts := strings.Contains(out, "experts:        4 per expert layer, 2 used per token"); experts != (arch == "nemotron_h_moe") {
			t.Errorf("%s: experts listed %v: %q", arch, experts, out)
		}
	}
}

// TestModelInfoPerLayerHeads: models whose header gives KV heads per layer
// (an array, 0 on the layers without attention) are said to have the KV
// heads of the layers that attend and how many those are, not "kv 0"; a
// model with one count for every layer has no such line.
func TestModelInfoPerLayerHeads(t *testing.T) {
	for _, c := range []struct {
		arch       string
		attn, kv   int
		wantInText string
	}{
		{"lfm2", 2, 2, "heads:          4 (kv 2) in 2 of 4 layers; the others have no attention"},
		{"nemotron_h", 1, 2, "heads:          4 (kv 2) in 1 of 4 layers; the others have no attention"},
		{"qwen3next", 2, 2, "heads:          4 (kv 2) in 2 of 4 layers; the others have no attention"},
		{"qwen3", 0, 2, "heads:          4 (kv 2)\n"},
	} {
		full := filepath.Join(t.TempDir(), c.arch+".gguf")
		if code, _, errs := runCmd(modelCmd, "synth", "--arch", c.arch, "--size", "tiny", "-o", full); code != 0 {
			t.Fatalf("synth %s: %d %s", c.arch, code, errs)
		}
		code, out, errs := runCmd(modelCmd, "info", full)
		if code != 0 || !strings.Contains(out, c.wantInText) {
			t.Errorf("%s info: %d %s, want %q in\n%s", c.arch, code, errs, c.wantInText, out)
		}
		code, out, errs = runCmd(modelCmd, "info", "--json", full)
		var v struct {
			KV   int  `json:"head_count_kv"`
			Attn *int `json:"attention_layers"`
		}
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
			t.Fatalf("%s info --json: %d %v %s", c.arch, code, err, errs)
		}
		if v.KV != c.kv || (c.attn == 0) != (v.Attn == nil) || (v.Attn != nil && *v.Attn != c.attn) {
			t.Errorf("%s info --json: head_count_kv %d attention_layers %v, want %d and %d", c.arch, v.KV, v.Attn, c.kv, c.attn)
		}
	}
}
