package e2e

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// idleLine is scripts/idle-traffic.sh's result line.
var idleLine = regexp.MustCompile(`N=(\d+) per-peer sent ([0-9.]+) KiB/s, (\d+) packets/s .*RSS (\d+) MiB per daemon`)

// TestIdleTraffic64: 64 real swarmd daemons with no models, one private
// swarm over TCP on the loopback of a network namespace of their own, all
// bootstrapped to the first (scripts/idle-traffic.sh, the measurement of
// docs/scale.md). Every daemon comes to hold every other alive, and then,
// idle, each sends at most 2 KiB/s, headers and TCP's acknowledgements
// counted: issue 28's goal at 40 daemons (136 KiB/s a peer with the old
// control plane, which grew with the swarm), held at 64.
func TestIdleTraffic64(t *testing.T) {
	if os.Getenv("SWARM_E2E_SCALE") == "" {
		t.Skip("64 daemons load the machine as they start: scripts/test.sh runs this alone, after the other tests (SWARM_E2E_SCALE=1)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the measurement makes a network namespace: it needs root")
	}
	const n, window = 64, "20"
	cmd := exec.Command("bash", "../scripts/idle-traffic.sh", bin, strconv.Itoa(n), window)
	cmd.Env = append(os.Environ(), "WARMUP=10", "SETTLE=300")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("idle-traffic.sh: %v\n%s", err, tail(string(out), 40))
	}
	t.Logf("%s", out)
	m := idleLine.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no result line in idle-traffic.sh's output:\n%s", out)
	}
	got, _ := strconv.Atoi(m[1])
	kib, _ := strconv.ParseFloat(m[2], 64)
	if got != n {
		t.Fatalf("measured %d daemons, want %d", got, n)
	}
	if kib > 2 {
		t.Errorf("idle daemons send %.1f KiB/s each (%s packets/s), want at most 2 KiB/s", kib, m[3])
	}
}
