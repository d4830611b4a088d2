package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

var (
	tinyOnce sync.Once
	tinyPath string
)

// tinyModel makes a synthetic model with the real CLI, once per test run.
func tinyModel(t testing.TB) string {
	t.Helper()
	tinyOnce.Do(func() {
		p := filepath.Join(bin, "tiny-qwen3.gguf")
		if out, code := runSwarmd(t, "model", "synth", "--arch", "qwen3", "--size", "tiny", "--type", "f32", "-o", p); code != 0 {
			t.Fatalf("swarmd model synth: exit %d\n%s", code, out)
		}
		tinyPath = p
	})
	if tinyPath == "" {
		t.Fatal("no synthetic model")
	}
	return tinyPath
}

// roleDaemon starts a daemon serving roles on one inference thread (many
// daemons share this machine's cores).
func roleDaemon(t *testing.T, boot string, roles ...string) *daemon {
	args := []string{"--no-mdns", "--threads", "1"}
	if boot != "" {
		args = append(args, "--bootstrap", boot)
	}
	for _, r := range roles {
		args = append(args, "--role", r+"="+tinyModel(t))
	}
	return startDaemon(t, "", args...)
}

type queryResult struct {
	QueryType       string `json:"query_type"`
	Mode            string `json:"mode"`
	FinalAnswer     string `json:"final_answer"`
	AgentsResponded int    `json:"agents_responded"`
	AgentResponses  []struct {
		Role, Peer, Content, Error string
		Tokens                     int
		Partial                    bool
		PartialReason              string `json:"partial_reason"`
	} `json:"agent_responses"`
	FailedAgents []struct {
		Role, Peer, Error string
	} `json:"failed_agents"`
	Aggregator *struct{ Role, Peer, Error string } `json:"aggregator"`
}

// moaSwarm starts an originator holding no model and five role peers.
func moaSwarm(t *testing.T) (origin *daemon, roles map[string]*daemon) {
	origin = startDaemon(t, "", "--no-mdns")
	boot := origin.bootstrapAddr()
	roles = map[string]*daemon{
		"reasoner":    roleDaemon(t, boot, "reasoner"),
		"writer":      roleDaemon(t, boot, "writer", "critic"),
		"factchecker": roleDaemon(t, boot, "factchecker", "drafter"),
		"concise":     roleDaemon(t, boot, "concise"),
		"aggregator":  roleDaemon(t, boot, "aggregator"),
	}
	eventually(t, 10*time.Second, "origin sees all 5 role peers", func() bool {
		alive := 0
		for _, a := range origin.peers() {
			if a {
				alive++
			}
		}
		return alive == 6
	})
	// A peer is alive before it has loaded and announced its roles.
	eventually(t, 30*time.Second, "origin sees all 7 roles", func() bool {
		return len(origin.roles()) == 7
	})
	return origin, roles
}

func TestMoAAskFromEmptyPeer(t *testing.T) {
	origin, roles := moaSwarm(t)
	var res queryResult
	origin.ctlJSON(&res, "ask", "--max-tokens", "16", "Explain why the sky is blue and compare it with sunsets")
	if res.QueryType != "COMPLEX_REASONING" || res.Mode != "moa" || res.AgentsResponded != 5 {
		t.Fatalf("result: %+v", res)
	}
	if res.Aggregator == nil || res.Aggregator.Peer != roles["aggregator"].peerID() {
		t.Fatalf("aggregator: %+v", res.Aggregator)
	}
	seen := map[string]string{}
	for _, a := range res.AgentResponses {
		seen[a.Role] = a.Peer
		if a.Tokens == 0 {
			t.Fatalf("agent %s produced no tokens", a.Role)
		}
	}
	if seen["critic"] != roles["writer"].peerID() || seen["drafter"] != roles["factchecker"].peerID() {
		t.Fatalf("agents answered from the wrong peers: %v", seen)
	}
	// The streamed text form, with the trace.
	out, errOut, code := origin.ctl("ask", "--trace", "--max-tokens", "8", "Who wrote Hamlet?")
	if code != 0 || out == "" || !strings.Contains(errOut, "reasoner") || !strings.Contains(errOut, "concise") {
		t.Fatalf("ask --trace: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
}

func TestMoARolePeerDiesMidQuery(t *testing.T) {
	origin, roles := moaSwarm(t)
	victim := roles["factchecker"] // factchecker and drafter
	victimID := victim.peerID()
	type answer struct {
		out, errOut string
		code        int
	}
	done := make(chan answer, 1)
	go func() {
		o, e, c := origin.ctl("--json", "ask", "--timeout", "60s", "--max-tokens", "1500",
			"Explain how vaccines train the immune system and compare them with natural infection")
		done <- answer{o, e, c}
	}()
	// Kill the peer while it is generating.
	eventually(t, 20*time.Second, "victim busy with the query", func() bool {
		var ps struct {
			Peers []struct {
				Self   bool `json:"self"`
				Active int  `json:"active"`
			} `json:"peers"`
		}
		victim.ctlJSON(&ps, "peers")
		return len(ps.Peers) > 0 && ps.Peers[0].Self && ps.Peers[0].Active > 0
	})
	victim.kill()
	var a answer
	select {
	case a = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("query did not finish after a role peer died")
	}
	if a.code != 0 {
		t.Fatalf("ask: exit %d: %s", a.code, a.errOut)
	}
	var res queryResult
	if err := json.Unmarshal([]byte(a.out), &res); err != nil {
		t.Fatal(err)
	}
	// The victim's two agents are left out, or kept as labelled partial
	// answers when they had written something; the other three answer.
	if res.AgentsResponded+len(res.FailedAgents) != 5 || res.FinalAnswer == "" {
		t.Fatalf("want 5 agents accounted for, got %d answers, failed %+v", res.AgentsResponded, res.FailedAgents)
	}
	for _, f := range res.FailedAgents {
		if f.Peer != victimID || (f.Role != "factchecker" && f.Role != "drafter") {
			t.Fatalf("left out: %+v", f)
		}
	}
	whole := 0
	for _, a := range res.AgentResponses {
		if a.Peer == victimID && (!a.Partial || a.PartialReason == "") {
			t.Fatalf("the killed peer's %s answer is not labelled partial: %+v", a.Role, a)
		}
		if a.Peer != victimID {
			whole++
		}
	}
	if whole != 3 {
		t.Fatalf("want 3 answers from live peers, got %d", whole)
	}

	// Every role peer gone: a clear error, exit 1.
	for _, d := range roles {
		d.kill()
	}
	_, errOut, code := origin.ctl("ask", "Who wrote Hamlet?")
	if code != 1 || !(strings.Contains(errOut, "no agent answered") || strings.Contains(errOut, "no live peer serves")) {
		t.Fatalf("no role peers: exit %d, stderr %q", code, errOut)
	}
}

// TestOpenAIClient drives the API with the official openai npm package:
// every request field, streamed and not (e2e/openai/check.mjs).
func TestOpenAIClient(t *testing.T) {
	dir := openaiClient(t)
	d := roleDaemon(t, "", "reasoner", "concise", "aggregator")
	// GET /v1/models lists what is served now: the client's first call
	// waits for the roles to have loaded.
	eventually(t, 30*time.Second, "the daemon serves its 3 roles", func() bool { return len(d.roles()) == 3 })
	runOpenAIClient(t, dir, "http://"+d.api)
}

// TestOpenAIClientReasoning: the official openai client reads a GPT-OSS
// answer's reasoning as reasoning_content, apart from its content,
// streamed and not. Real peers in this process (nodetest), the role
// peer's answer the tokens of a harmony answer sent over the real MoA
// wire (nodetest.ReplayHarmony: random weights write no harmony).
func TestOpenAIClientReasoning(t *testing.T) {
	dir := openaiClient(t)
	model := filepath.Join(t.TempDir(), "gptoss.gguf")
	if err := engine.Synth(context.Background(), model, engine.SynthSpec{Arch: "gptoss", Size: "tiny", Type: "f32", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	peers := nodetest.Cluster(t, 2, func(i int, c *node.Config) {
		c.Engine.Threads, c.Engine.Context = 1, 256
		if i == 0 {
			c.MoA.Unverified = "ask" // no copy of the model to check the holder with
		} else {
			c.Roles = map[string]string{"reasoner": model}
		}
	})
	api := "http://" + peers[0].APIAddr()
	eventually(t, 30*time.Second, "the origin sees the reasoner", func() bool {
		resp, err := http.Get(api + "/v1/models/reasoner")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	nodetest.ReplayHarmony(t, peers[1], model)
	runOpenAIClient(t, dir, api, "reasoning", nodetest.HarmonyFinal, nodetest.HarmonyThought)
}

// openaiClient returns a directory holding check.mjs and the openai
// package (installed once per machine; each run gets its own copy of the
// script: runs from several checkouts may overlap).
func openaiClient(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm is not installed: run scripts/install-deps.sh")
	}
	cache := filepath.Join(os.TempDir(), "swarm-e2e-openai")
	pkg, err := os.ReadFile(filepath.Join("openai", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := os.ReadFile(filepath.Join(cache, "package.json")); !bytes.Equal(old, pkg) ||
		!exists(filepath.Join(cache, "node_modules", "openai", "package.json")) {
		os.MkdirAll(cache, 0o755)
		if err := os.WriteFile(filepath.Join(cache, "package.json"), pkg, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = cache
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install openai: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("openai", "check.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "check.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(cache, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runOpenAIClient runs check.mjs in dir against base with args and logs
// the JSON it prints.
func runOpenAIClient(t *testing.T, dir, base string, args ...string) {
	t.Helper()
	cmd := exec.Command("node", append([]string{"check.mjs", base}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	var seen map[string]any
	if err := json.Unmarshal(out[strings.LastIndex(string(out), "\n{")+1:], &seen); err != nil {
		t.Fatalf("openai client output: %v\n%s", err, out)
	}
	t.Logf("openai client: %s", out)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestSlowDeviceAnswers: a role peer running about 7x slower than this
// machine (SIGSTOPped 60 ms of every 70 from before it loads, so it
// measures and announces its slow speed, as a Pi would) answers a default
// `swarmctl ask` in full, though the answer takes longer than the fixed 6 s
// agents used to get.
func TestSlowDeviceAnswers(t *testing.T) {
	small := synthModel(t, "qwen3", "small", "q8_0")
	origin := startDaemon(t, "", "--no-mdns")
	startDaemonThrottled(t, "", &throttle{run: 10 * time.Millisecond, stop: 60 * time.Millisecond},
		"--no-mdns", "--threads", "1", "--bootstrap", origin.bootstrapAddr(),
		"--role", "reasoner="+small, "--role", "concise="+small)
	eventually(t, 30*time.Second, "slow roles announced", func() bool {
		var ps client.Peers
		origin.ctlJSON(&ps, "peers")
		for _, p := range ps.Peers {
			if len(p.Roles) == 2 {
				return true
			}
		}
		return false
	})
	start := time.Now()
	out, errOut, code := runCtlWithin(3*time.Minute, "", "--api", origin.api, "--json", "ask", "What is the capital of Australia?")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("ask on a slow device: exit %d after %s: %s", code, took, errOut)
	}
	var res queryResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	tokens := 0
	for _, a := range res.AgentResponses {
		if a.Partial {
			t.Fatalf("%s cut off on a slow device (%s): %q", a.Role, a.PartialReason, a.Content)
		}
		tokens += a.Tokens
	}
	if res.AgentsResponded != 2 || len(res.FailedAgents) != 0 || res.FinalAnswer == "" {
		t.Fatalf("slow device: %d answers, failed %+v", res.AgentsResponded, res.FailedAgents)
	}
	t.Logf("slow device answered in %s (%d tokens from 2 agents)", took.Round(time.Millisecond), tokens)
}
