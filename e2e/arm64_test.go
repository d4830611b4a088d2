package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

// An arm64 peer in an amd64 swarm: swarmd cross-built for linux/arm64 by
// scripts/cross-arm64.sh (Debian's aarch64 gcc, the dot-product build of
// ggml) runs under qemu-user as a Raspberry Pi 5's Cortex-A76, on
// loopback beside amd64 daemons. qemu is called directly with the cross
// libc as its prefix: binfmt_misc need not be registered.

// arm64CPU is the CPU qemu emulates: a Pi 5's, which has the dot product
// the default build needs (a Pi 4's cortex-a72 dies on it with SIGILL).
const arm64CPU = "cortex-a76"

// arm64Prefix holds the aarch64 loader and libc of Debian's cross
// toolchain (libc6-dev-arm64-cross).
const arm64Prefix = "/usr/aarch64-linux-gnu"

var (
	arm64Once sync.Once
	arm64Exe  []string
	arm64Err  error
)

// arm64Tools finds qemu-aarch64 and the cross compilers, or says what is
// missing.
func arm64Tools() (qemu string, missing []string) {
	for _, q := range []string{"qemu-aarch64", "qemu-aarch64-static"} {
		if p, err := exec.LookPath(q); err == nil {
			qemu = p
			break
		}
	}
	if qemu == "" {
		missing = append(missing, "qemu-aarch64 (apt: qemu-user)")
	}
	for _, tool := range []string{"aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" (apt: "+strings.TrimPrefix(tool, "aarch64-linux-gnu-")+"-aarch64-linux-gnu)")
		}
	}
	if _, err := os.Stat(arm64Prefix + "/lib/ld-linux-aarch64.so.1"); err != nil {
		missing = append(missing, arm64Prefix+"/lib/ld-linux-aarch64.so.1 (apt: libc6-dev-arm64-cross)")
	}
	return qemu, missing
}

// arm64Swarmd cross-builds swarmd for linux/arm64 once and returns the
// command line that runs it under qemu-user. Missing tools fail the test
// under CI=true and skip it elsewhere; the test installs nothing.
func arm64Swarmd(t *testing.T) []string {
	t.Helper()
	qemu, missing := arm64Tools()
	if len(missing) > 0 {
		msg := "arm64 e2e needs " + strings.Join(missing, ", ") + ": run scripts/install-deps.sh"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	arm64Once.Do(func() {
		out := filepath.Join(bin, "linux-arm64")
		start := time.Now()
		cmd := exec.Command("../scripts/cross-arm64.sh", out, "swarmd")
		if b, err := cmd.CombinedOutput(); err != nil {
			arm64Err = fmt.Errorf("scripts/cross-arm64.sh: %v\n%s", err, tail(string(b), 40))
			return
		}
		arm64Exe = []string{qemu, "-L", arm64Prefix, "-cpu", arm64CPU, filepath.Join(out, "swarmd")}
		t.Logf("cross-built swarmd for linux/arm64 in %s", time.Since(start).Round(100*time.Millisecond))
	})
	if arm64Err != nil {
		t.Fatal(arm64Err)
	}
	return arm64Exe
}

// startDaemonExe is startDaemon for a swarmd started by another command
// line (exe: the program and its arguments before swarmd's flags).
func startDaemonExe(t *testing.T, exe []string, extra ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, dir: t.TempDir(), exe: exe}
	shareKey(t, d.dir, extra)
	d.args = append([]string{"--data", d.dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0",
		"--log-level", "debug"}, extra...)
	d.start()
	t.Cleanup(d.kill)
	return d
}

// noLiarLogged fails where d's log says it took a peer for a liar: the
// tests that call it run honest peers only.
func noLiarLogged(t *testing.T, d *daemon) {
	t.Helper()
	for _, bad := range []string{"failed a challenge", "peer banned", "proven liar"} {
		if strings.Contains(d.log.String(), bad) {
			t.Fatalf("the originator logged %q: an honest peer was taken for a liar:\n%s", bad, tail(d.log.String(), 60))
		}
	}
}

// challengeLine is the checker's log line for a passed challenge.
var challengeLine = regexp.MustCompile(`msg="verify: peer passed a challenge" peer=(\S+) .*worst_rel_err=(\S+)`)

// challengeErr is the worst relative L2 error the checker on d saw in a
// challenge id passed, and whether it saw one.
func challengeErr(d *daemon, id string) (float64, bool) {
	for _, m := range challengeLine.FindAllStringSubmatch(d.log.String(), -1) {
		if m[1] == id {
			e, err := strconv.ParseFloat(m[2], 64)
			return e, err == nil
		}
	}
	return 0, false
}

// mismatchLine is the originator's log line for routes that disagree.
var mismatchLine = regexp.MustCompile(`msg="pipeline: spot-check mismatch; finding the liar" at_token=\d+ disagreement="by ([^,]+),`)

// mismatchDiff is the largest difference between two routes' logits that
// d logged as a spot-check mismatch (0: none).
func mismatchDiff(d *daemon) float64 {
	worst := 0.0
	for _, m := range mismatchLine.FindAllStringSubmatch(d.log.String(), -1) {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			worst = max(worst, v)
		}
	}
	return worst
}

type spotResult struct {
	Pipeline struct {
		Tokens      []int32                 `json:"tokens"`
		Hops        []struct{ Peer string } `json:"hops"`
		SpotChecked int                     `json:"spot_checked"`
		SpotMaxDiff float64                 `json:"spot_max_diff"`
		Mismatches  int                     `json:"mismatches"`
		Reroutes    []json.RawMessage       `json:"reroutes"`
	} `json:"pipeline"`
}

// TestArm64StageInAmd64Swarm: an arm64 swarmd under qemu serves the second
// half of a model to an amd64 originator holding the first half. With f32
// hidden states on the wire and greedy sampling, the tokens equal those of
// one amd64 daemon running the whole model, for f32, q8_0 and q4_k
// weights. The originator's challenge of the arm64 peer (each layer
// recomputed here on amd64) passes, and then, with an amd64 peer holding
// the same layers, every step runs on both (a spot-check: arm64 route
// against amd64 route); the honest arm64 peer is never banned. The
// figures (the challenge's worst relative L2 error per layer, the largest
// logit difference between the routes) go to the test log.
func TestArm64StageInAmd64Swarm(t *testing.T) {
	exe := arm64Swarmd(t)
	for _, tc := range []struct {
		typ, size string
		layers    int
	}{
		{"f32", "tiny", 4},
		{"q8_0", "tiny", 4},
		{"q4_k", "small", 8}, // tiny rows are too short for k-quants: it would be q8_0
	} {
		t.Run(tc.typ, func(t *testing.T) {
			model := synthModel(t, "qwen3", tc.size, tc.typ)
			half := tc.layers / 2
			first := fmt.Sprintf("%s:0-%d", model, half)
			second := fmt.Sprintf("%s:%d-%d", model, half, tc.layers)
			want, prompt := singleNodeTokens(t, model, tc.layers)

			conf := filepath.Join(t.TempDir(), "a.json")
			if err := os.WriteFile(conf, []byte(`{"pipeline":{"spot_check":1}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			a := startDaemon(t, "", "--no-mdns", "--threads", "1", "--config", conf, "--shard", first)
			boot := a.bootstrapAddr()
			r := startDaemonExe(t, exe, "--no-mdns", "--threads", "1", "--bootstrap", boot,
				"--device", "qemu-"+arm64CPU, "--shard", second)
			rID := r.peerID()
			waitHolders(t, a, 2)
			if arch := peerArch(t, a, rID); arch != "arm64+repack" {
				t.Fatalf("the qemu peer announces arch %q, want arm64+repack (scripts/cross-arm64.sh builds the repacked kernels)", arch)
			}

			// The arm64 peer is the only holder of the second half.
			var res spotResult
			a.ctlJSON(&res, append(pipeAsk, prompt)...)
			p := res.Pipeline
			if len(p.Hops) != 2 || p.Hops[1].Peer != rID {
				t.Fatalf("route %+v: want the amd64 originator, then the arm64 peer %s", p.Hops, rID)
			}
			if !slices.Equal(p.Tokens, want) {
				t.Fatalf("tokens through the arm64 stage differ from one amd64 daemon:\n got %v\nwant %v", p.Tokens, want)
			}
			relErr, ok := challengeErr(a, rID)
			if !ok {
				t.Fatalf("the originator logged no passed challenge of the arm64 peer:\n%s", tail(a.log.String(), 40))
			}

			// An amd64 peer holds the same layers: every step also runs on a
			// second route, and the two must agree (or, where they do not,
			// the arm64 peer is still not proven a liar).
			bd := startDaemon(t, "", "--no-mdns", "--threads", "1", "--bootstrap", boot, "--shard", second)
			bID := bd.peerID()
			waitHolders(t, a, 3)
			var res2 spotResult
			a.ctlJSON(&res2, append(pipeAsk, prompt)...)
			p2 := res2.Pipeline
			if !slices.Equal(p2.Tokens, want) {
				t.Fatalf("spot-checked tokens differ from one amd64 daemon:\n got %v\nwant %v", p2.Tokens, want)
			}
			// The routes agree at every step: f32 within the spot-check's
			// 1e-3; quantized weights within 1e-1, the bound across CPU
			// architectures (they differ by about 1e-2 to 3e-2).
			diff := max(p2.SpotMaxDiff, mismatchDiff(a))
			if p2.SpotChecked != len(want) || p2.Mismatches != 0 {
				t.Fatalf("%s: %d of %d steps spot-checked, %d mismatches (largest difference %.3g)",
					tc.typ, p2.SpotChecked, len(want), p2.Mismatches, diff)
			}
			bErr, _ := challengeErr(a, bID)
			noLiarLogged(t, a)
			if !a.peers()[rID] {
				t.Fatal("the arm64 peer is no longer alive in the originator's table")
			}
			t.Logf("%s %s: %d tokens equal to one amd64 daemon's, through the arm64 stage and spot-checked; "+
				"challenge of the arm64 peer: worst relative L2 error per layer %.3g (the amd64 peer: %.3g); "+
				"arm64 vs amd64 route: %d steps agreed, %d mismatches, largest logit difference %.3g of the largest logit",
				tc.typ, tc.size, len(want), relErr, bErr, p2.SpotChecked, p2.Mismatches, diff)
		})
	}
}

// singleNodeTokens runs the whole model on one amd64 daemon and returns
// the reference: 24 varied tokens and the prompt that gave them.
func singleNodeTokens(t *testing.T, model string, layers int) ([]int32, string) {
	t.Helper()
	d := startDaemon(t, "", "--no-mdns", "--threads", "1", "--shard", fmt.Sprintf("%s:0-%d", model, layers))
	defer d.kill()
	var last []int32
	for _, p := range pipePrompts {
		var res pipeResult
		d.ctlJSON(&res, append(pipeAsk, p)...)
		distinct := map[int32]bool{}
		for _, w := range res.Pipeline.Tokens {
			distinct[w] = true
		}
		if len(res.Pipeline.Tokens) == 24 && len(distinct) >= 4 {
			return res.Pipeline.Tokens, p
		}
		last = res.Pipeline.Tokens
	}
	t.Fatalf("no prompt gives 24 varied reference tokens (last: %v)", last)
	return nil, ""
}

// waitHolders waits until d sees the model covered by n holders.
func waitHolders(t *testing.T, d *daemon, n int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d holders announced", n), func() bool {
		var sh client.Shards
		d.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered && len(sh.Models[0].Holders) == n
	})
}

// peerArch is the architecture id announces, as d sees it.
func peerArch(t *testing.T, d *daemon, id string) string {
	t.Helper()
	var ps client.Peers
	d.ctlJSON(&ps, "peers")
	for _, p := range ps.Peers {
		if p.PeerID == id {
			return p.Platform.Arch
		}
	}
	t.Fatalf("%s is not in the peer table", id)
	return ""
}

// TestArm64DefaultBuildOnPi4: the default arm64 build needs the dot
// product, which a Raspberry Pi 4's Cortex-A72 lacks (it would die with
// SIGILL at its first inference); run there, swarmd refuses at start and
// names the flags to build with instead.
func TestArm64DefaultBuildOnPi4(t *testing.T) {
	exe := slices.Clone(arm64Swarmd(t))
	exe[slices.Index(exe, "-cpu")+1] = "cortex-a72"
	model := archModel(t, "qwen3")
	for _, args := range [][]string{
		{"bench", "--model", model, "--threads", "1", "--reps", "1", "--prompt", "2", "--gen", "2"},
		{"--data", t.TempDir(), "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--no-mdns"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, exe[0], append(exe[1:], args...)...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "ARM64_FLAGS='-O3 -mcpu=cortex-a72'") {
			t.Fatalf("swarmd %s on a cortex-a72: %v, want exit 1 naming the flags for it:\n%s", args[0], err, tail(string(out), 20))
		}
	}
}
