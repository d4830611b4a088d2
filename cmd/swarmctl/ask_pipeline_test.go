package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/answer"
)

// TestPipelineFooterDisputed: an answer that ran over layers two holders
// computed differently, nothing having shown which lied, says so in its
// footer, naming the layers and both peers; an answer without says
// nothing of it.
func TestPipelineFooterDisputed(t *testing.T) {
	a, b := "12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "12D3KooWBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	for _, tc := range []struct {
		disputed []answer.Dispute
		want     []string
	}{
		{nil, nil},
		{[]answer.Dispute{{Start: 2, End: 6, Peers: []string{a, b}}}, []string{"disputed: layers [2,6)", shortID(a), shortID(b), "may be wrong"}},
	} {
		var stderr bytes.Buffer
		res := &answer.Result{Pipeline: &answer.Pipeline{Model: "m", DType: "f32", Done: "stop", Disputed: tc.disputed}}
		if err := pipelineFooter(&env{stderr: &stderr}, res, false); err != nil {
			t.Fatal(err)
		}
		out := stderr.String()
		if tc.want == nil && strings.Contains(out, "disputed") {
			t.Errorf("footer %q speaks of a dispute", out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("footer %q lacks %q", out, w)
			}
		}
	}
}

// TestPipelineFooterCheckLost: an answer drawn for a spot check with steps
// no second route compared says how many and why; one without says
// nothing of it.
func TestPipelineFooterCheckLost(t *testing.T) {
	for _, lost := range []*answer.CheckLost{nil, {Steps: 7, Reason: "the check route failed: hung"}} {
		var stderr bytes.Buffer
		res := &answer.Result{Pipeline: &answer.Pipeline{Model: "m", DType: "f32", Done: "stop", SpotChecked: 5, CheckLost: lost}}
		if err := pipelineFooter(&env{stderr: &stderr}, res, false); err != nil {
			t.Fatal(err)
		}
		out := stderr.String()
		if got := strings.Contains(out, "check lost: 7 steps"); got != (lost != nil) || lost != nil && !strings.Contains(out, "hung") {
			t.Errorf("check lost %+v: footer %q", lost, out)
		}
	}
}
