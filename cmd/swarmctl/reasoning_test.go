package main

import (
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/nodetest"
)

// TestAskReasoning: swarmctl ask --reasoning shows a GPT-OSS answer's
// reasoning on stderr, the answer alone on stdout; without the flag the
// reasoning is not shown; --json has it as reasoning. Real peers, the
// role peer's answer the tokens of a harmony answer sent over the real
// MoA wire (nodetest.ReplayHarmony: random weights write no harmony).
func TestAskReasoning(t *testing.T) {
	api := nodetest.HarmonyReasoner(t)
	for _, tc := range []struct {
		args        []string
		out, stderr string // stdout wanted; stderr holds the reasoning or not
	}{
		{[]string{"--reasoning"}, nodetest.HarmonyFinal + "\n", nodetest.HarmonyThought},
		{nil, nodetest.HarmonyFinal + "\n", ""},
		{[]string{"--json"}, `"reasoning": "` + nodetest.HarmonyThought + `"`, ""},
	} {
		args := append([]string{"--api", api, "ask", "--mode", "reasoner", "--max-tokens", "64"}, tc.args...)
		code, out, errs := ctl(t, nil, append(args, "The capital of France?")...)
		switch {
		case code != 0:
			t.Fatalf("%v: exit %d: %s", tc.args, code, errs)
		case tc.args == nil && out != tc.out, tc.args != nil && !strings.Contains(out, tc.out):
			t.Errorf("%v: stdout %q, want %q", tc.args, out, tc.out)
		case tc.args != nil && tc.args[0] == "--reasoning" && (out != tc.out || !strings.Contains(errs, tc.stderr)):
			t.Errorf("--reasoning: stdout %q, stderr %q; want the answer alone on stdout, the reasoning on stderr", out, errs)
		case tc.stderr == "" && strings.Contains(errs, nodetest.HarmonyThought):
			t.Errorf("%v: stderr %q shows the reasoning unasked", tc.args, errs)
		}
	}
}
