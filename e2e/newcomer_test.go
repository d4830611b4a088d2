package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

// The defects a new user hit, each driven through the real binaries.

// TestCLISliceServedByShard: a slice made with `swarmd model slice` records
// its model's CID, so `swarmd --shard SLICE:A-B` serves it under the full
// model's CID next to a peer slicing the full model itself.
func TestCLISliceServedByShard(t *testing.T) {
	model := archModel(t, "qwen3")
	slice := filepath.Join(t.TempDir(), "upper.gguf")
	if out, code := runSwarmd(t, "model", "slice", model, "--layers", "2-4", "-o", slice); code != 0 {
		t.Fatalf("model slice: exit %d\n%s", code, out)
	}
	var info struct {
		CID       string `json:"cid"`
		SourceCID string `json:"source_cid"`
	}
	out, code := runSwarmd(t, "model", "info", "--json", slice)
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil {
		t.Fatalf("model info %s: exit %d\n%s", slice, code, out)
	}
	full := modelCID(t, model)
	if info.SourceCID != full {
		t.Fatalf("slice source_cid %q, want %s", info.SourceCID, full)
	}
	lower := startDaemon(t, "", "--no-mdns", "--threads", "1", "--shard", model+":0-2")
	upper := startDaemon(t, "", "--no-mdns", "--threads", "1", "--bootstrap", lower.bootstrapAddr(), "--shard", slice+":2-4")
	var sh client.Shards
	eventually(t, 15*time.Second, "the CLI slice completes the model", func() bool {
		upper.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered && sh.Models[0].ModelCID == full
	})
	eventually(t, 15*time.Second, "the asking peer sees the model covered", func() bool {
		lower.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered
	})
	var res pipeResult
	lower.ctlJSON(&res, append(pipeAsk, pipePrompts[0])...)
	if len(res.Pipeline.Tokens) == 0 {
		t.Fatalf("pipeline through the CLI slice: %+v", res.Pipeline)
	}
}

func modelCID(t *testing.T, path string) string {
	t.Helper()
	out, code := runSwarmd(t, "model", "info", "--json", path)
	var v struct {
		CID string `json:"cid"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("model info %s: exit %d\n%s", path, code, out)
	}
	return v.CID
}

// TestDataDirInUse: a second swarmd on a data dir in use exits 1 naming the
// first one's PID, and leaves its api.addr alone.
func TestDataDirInUse(t *testing.T) {
	first := startDaemon(t, "", "--no-mdns")
	addrFile := filepath.Join(first.dir, "api.addr")
	before, _ := os.ReadFile(addrFile)
	out, code := runSwarmd(t, "--data", first.dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--no-mdns")
	want := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "data dir in use") {
		t.Fatalf("second swarmd: exit %d, want 1 and an error naming %q:\n%s", code, want, out)
	}
	if after, err := os.ReadFile(addrFile); err != nil || string(after) != string(before) {
		t.Fatalf("api.addr after the refused daemon: %q, %v; want %q", after, err, before)
	}
	if _, errOut, code := first.ctl("status"); code != 0 {
		t.Fatalf("first daemon after the refusal: exit %d: %s", code, errOut)
	}
}

// TestNoMulticastInterface: in a network namespace whose only interface
// (loopback) has no multicast, swarmd starts without mDNS and says so.
func TestNoMulticastInterface(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ns := fmt.Sprintf("swe2e-nomc-%d", os.Getpid())
	for _, args := range [][]string{{"netns", "add", ns}, {"netns", "exec", ns, "ip", "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	d := startDaemon(t, ns)
	var st client.Status
	d.ctlJSON(&st, "status")
	if st.MDNS || !strings.Contains(strings.Join(st.Warnings, "\n"), "mDNS is off: no supported interface") {
		t.Fatalf("status: mdns %v, warnings %q", st.MDNS, st.Warnings)
	}
	if !strings.Contains(d.log.String(), "level=WARN") {
		t.Fatalf("no warning logged:\n%s", d.log)
	}
}

// TestBootstrapWarningInStatus: an unreachable bootstrap peer shows under
// WARNINGS in `swarmctl status`.
func TestBootstrapWarningInStatus(t *testing.T) {
	gone := startDaemon(t, "", "--no-mdns")
	addr := gone.bootstrapAddr()
	gone.kill()
	d := startDaemon(t, "", "--no-mdns", "--bootstrap", addr)
	eventually(t, 10*time.Second, "warning in swarmctl status", func() bool {
		out, _, code := d.ctl("status")
		return code == 0 && strings.Contains(out, "WARNINGS") && strings.Contains(out, "is unreachable")
	})
	if n := strings.Count(d.log.String(), "level=WARN msg=\"bootstrap peer"); n != 1 {
		t.Fatalf("%d bootstrap warnings logged, want 1", n)
	}
}

// TestAskArguments: flags after the prompt are flags, "--" ends them, and
// the prompt may come from stdin.
func TestAskArguments(t *testing.T) {
	d := roleDaemon(t, "", "reasoner")
	ask := func(stdin string, args ...string) queryResult {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "swarmctl"), append([]string{"--api", d.api}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("swarmctl %q: %v\n%s", args, err, out)
		}
		var res struct {
			queryResult
			Query string `json:"query"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("swarmctl %q: %v\n%s", args, err, out)
		}
		if len(res.AgentResponses) == 0 {
			t.Fatalf("swarmctl %q: no agent answered", args)
		}
		res.queryResult.FinalAnswer = res.Query // the question the swarm got
		return res.queryResult
	}
	cases := []struct {
		name, stdin string
		args        []string
		query       string
		maxTokens   int
	}{
		{"flags after the prompt", "", []string{"ask", "hi", "--max-tokens", "2", "--json"}, "hi", 2},
		{"-- ends the flags", "", []string{"ask", "--json", "--max-tokens", "3", "hi", "--", "--max-tokens", "2"}, "hi --max-tokens 2", 3},
		{"- reads stdin", "what is 2+2?\n", []string{"ask", "-", "--json", "--max-tokens", "2"}, "what is 2+2?", 2},
		{"piped stdin", "why?\n", []string{"--json", "ask", "--max-tokens", "2"}, "why?", 2},
	}
	for _, c := range cases {
		res := ask(c.stdin, c.args...)
		if res.FinalAnswer != c.query || res.AgentResponses[0].Tokens > c.maxTokens {
			t.Errorf("%s: the swarm got %q and answered %d tokens; want %q and at most %d", c.name, res.FinalAnswer,
				res.AgentResponses[0].Tokens, c.query, c.maxTokens)
		}
	}
}

// TestCLIExitCodesAndVersion: usage errors exit 2 in both binaries, help
// exits 0, and both print the same version.
func TestCLIExitCodesAndVersion(t *testing.T) {
	sd, code := runSwarmd(t, "version")
	ctlOut, _, ctlCode := runCtl("", "version")
	if code != 0 || ctlCode != 0 || strings.TrimPrefix(sd, "swarmd ") != strings.TrimPrefix(ctlOut, "swarmctl ") {
		t.Fatalf("versions differ: swarmd %q (exit %d), swarmctl %q (exit %d)", sd, code, ctlOut, ctlCode)
	}
	for _, args := range [][]string{{"--slots", "0"}, {"--role", "critic=a.gguf", "--role", "critic=b.gguf"}, {"model", "slice"}, {"bogus"}} {
		if out, code := runSwarmd(t, args...); code != 2 {
			t.Errorf("swarmd %q: exit %d, want 2\n%s", args, code, out)
		}
	}
	for _, args := range [][]string{{"--api", "garbage", "status"}, {"ask", "--temperature", "-5", "hi"}, {"frob"}} {
		if _, errOut, code := runCtl("", args...); code != 2 {
			t.Errorf("swarmctl %q: exit %d, want 2\n%s", args, code, errOut)
		}
	}
	for _, args := range [][]string{{"model", "slice", "-h"}, {"version", "--help"}, {"-h"}} {
		if out, code := runSwarmd(t, args...); code != 0 || !strings.Contains(out, "Usage") {
			t.Errorf("swarmd %q: exit %d, want 0 and usage\n%s", args, code, out)
		}
	}
	if out, _, code := runCtl("", "ask", "-h"); code != 0 || !strings.Contains(out, "PROMPT") {
		t.Errorf("swarmctl ask -h: exit %d\n%s", code, out)
	}
}
