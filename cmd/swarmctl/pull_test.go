package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/shards/hubtest"
)

// TestPullError: a pull the hub refuses says why once on stderr, with no
// progress line for a stage it never reached.
func TestPullError(t *testing.T) {
	q8, err := os.ReadFile(nodetest.TinyModel(t, "q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	hub := hubtest.New(t)
	hub.Add("test/Tiny-GGUF", "tiny-Q8_0.gguf", q8, false)
	peers := nodetest.Cluster(t, 1, func(_ int, c *node.Config) { c.Hub.Endpoint = hub.URL })
	t.Setenv("HF_TOKEN", "")
	for _, tty := range []bool{false, true} {
		code, _, errs := ctlTTY(t, tty, "--api", peers[0].APIAddr(), "pull", "hf.co/test/Tiny-GGUF:Q2_K")
		const want = "quants: Q8_0"
		if code != 1 || strings.Count(errs, want) != 1 {
			t.Errorf("tty %v: exit %d, stderr %q; want 1 and %q once", tty, code, errs, want)
		}
		for _, line := range strings.Split(strings.ReplaceAll(errs, "\r", "\n"), "\n") {
			if strings.Contains(line, ":  ") || strings.HasSuffix(line, ": ") {
				t.Errorf("tty %v: a line with a blank stage: %q", tty, line)
			}
		}
	}
}

// ctlTTY runs swarmctl in-process as ctl does, stderr a terminal or not.
func ctlTTY(t *testing.T, stderrTTY bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("SWARM_API", "")
	t.Setenv("SWARM_API_TOKEN", "")
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, stderrTTY: stderrTTY}
	code = run(context.Background(), e, args)
	return code, out.String(), errb.String()
}
