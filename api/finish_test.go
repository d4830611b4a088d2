package api_test

import (
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestFinishLength: an answer cut short by the model's context filling up
// ends with finish_reason length, as one max_tokens cuts does: on a
// role's path (MoA, and the role asked by name) and on the pipeline's,
// streamed and not.
func TestFinishLength(t *testing.T) {
	model := nodetest.TinyModel(t, "f32")
	rcfg := nodetest.Config(t.TempDir())
	rcfg.Roles = map[string]string{"reasoner": model}
	rcfg.Engine.Threads, rcfg.Engine.Context = 1, 300 // a role's prompt takes ~240
	roles := nodetest.Start(t, rcfg).APIAddr()
	waitModel(t, roles, "reasoner")
	pcfg := nodetest.Config(t.TempDir())
	pcfg.Shards = []string{model + ":0-4"}
	pcfg.Engine.Threads, pcfg.Engine.Context = 1, 64
	pipe := nodetest.Start(t, pcfg).APIAddr()
	pc := client.New(pipe, "")
	nodetest.Eventually(t, 15*time.Second, "the pipeline peer announces the whole model", func() bool {
		sh, err := pc.Shards(t.Context())
		return err == nil && len(sh.Models) == 1 && sh.Models[0].Covered
	})
	const maxTokens = 500 // far past either context
	body := func(model string) string {
		return `{"model":"` + model + `","max_tokens":500,"temperature":0,"messages":[{"role":"user","content":"Tell me a story."}]}`
	}
	for _, tc := range []struct {
		name, api, model string
		context          int
	}{
		{"role", roles, "reasoner", 300},
		{"moa", roles, "swarm-moa", 300},
		{"pipeline", pipe, "swarm", 64},
	} {
		for _, stream := range []bool{false, true} {
			a := chat(t, tc.api, body(tc.model), stream)
			if a.status != 200 || a.finish != "length" || a.text == "" {
				t.Errorf("%s (stream %v): %d finish_reason %q, text %q %s; want length", tc.name, stream, a.status, a.finish, a.text, a.errBody)
			}
			if !stream && (a.usage["completion_tokens"] == 0 || a.usage["completion_tokens"] >= maxTokens ||
				a.usage["prompt_tokens"]+a.usage["completion_tokens"] != tc.context+1) {
				// The last token is sampled, never fed back: it needs no room.
				t.Errorf("%s: usage %v: want the answer to end where the %d-token context did", tc.name, a.usage, tc.context)
			}
		}
	}
}
