package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestComplete: `swarmctl complete` has the writer (or the role named)
// continue a text; a base model without a chat template answers it, and
// `ask` of that model says why it cannot chat; bad flags exit 2.
func TestComplete(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base.gguf")
	if err := engine.Synth(t.Context(), base, engine.SynthSpec{Arch: "qwen3", Size: "tiny", Type: "f32", Seed: 3, NoChatTemplate: true}); err != nil {
		t.Fatal(err)
	}
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine.Threads, cfg.Engine.Context = 1, 256
	cfg.Roles = map[string]string{"writer": nodetest.TinyModel(t, "f32"), "reasoner": base}
	p := nodetest.Start(t, cfg)
	nodetest.Eventually(t, 30*time.Second, "both roles announced", func() bool {
		self, ok := p.Swarm().View().Get(p.ID())
		return ok && len(self.Cap.Roles) == 2
	})
	api := p.APIAddr()
	for _, args := range [][]string{
		{"complete", "--max-tokens", "4", "Once upon a time"},
		{"complete", "--role", "reasoner", "--max-tokens", "4", "--trace", "Once upon a time"},
	} {
		code, out, errs := ctl(t, nil, append([]string{"--api", api}, args...)...)
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	code, _, errs := ctl(t, nil, "--api", api, "ask", "--mode", "reasoner", "hi")
	if code != 1 || !strings.Contains(errs, "no usable chat template") {
		t.Fatalf("ask a base model: exit %d, stderr %q", code, errs)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"complete", "--role", "poet", "hi"}, `--role "poet"`},
		{[]string{"complete", "--max-tokens", "0", "hi"}, "--max-tokens 0"},
		{[]string{"complete"}, "complete needs a text"},
	} {
		if code, _, errs := ctl(t, nil, append([]string{"--api", api}, tc.args...)...); code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
