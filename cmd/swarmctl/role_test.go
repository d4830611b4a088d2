package main

import (
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/nodetest"
)

// TestRoleAndShardAddShowProgress: `role add` and `shard add` show their
// load's progress on stderr as `pull` does (the slice, the weights, then
// the engine's own setup as a stage of its own), and print their result.
func TestRoleAndShardAddShowProgress(t *testing.T) {
	model := nodetest.TinyModel(t, "q8_0")
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine.Threads, cfg.Engine.Context = 1, 256
	api := nodetest.Start(t, cfg).APIAddr()
	for _, tc := range []struct {
		args []string
		out  string
		errs []string
	}{
		{[]string{"role", "add", "reasoner", model}, "serving reasoner", []string{"load running: weights", "loading into engine", "load done"}},
		{[]string{"shard", "add", model + ":0-2"}, "serving layers [0,2)", []string{"slice", "load running: weights", "loading into engine", "load done"}},
	} {
		code, out, errs := ctlTTY(t, false, append([]string{"--api", api}, tc.args...)...)
		if code != 0 || !strings.Contains(out, tc.out) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out, errs)
		}
		for _, w := range tc.errs {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: stderr %q: want %q", tc.args, errs, w)
			}
		}
	}
}
