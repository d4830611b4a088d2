// Package e2e builds the real binaries and drives real daemons with the
// real CLI: several swarmd processes on loopback (and in network
// namespaces this test creates), swarmctl against their APIs.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var bin string // directory holding swarmd and swarmctl

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "swarm-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := build()
	if code == 0 {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func build() int {
	for _, b := range []struct{ name, pkg, cgo string }{
		{"swarmd", "../cmd/swarmd", ""}, {"swarmctl", "../cmd/swarmctl", "CGO_ENABLED=0"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, b.name), b.pkg)
		cmd.Env = os.Environ()
		if b.cgo != "" {
			cmd.Env = append(cmd.Env, b.cgo)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", b.name, err, out)
			return 1
		}
	}
	return 0
}

// daemon is one swarmd process.
type daemon struct {
	t      testing.TB
	dir    string
	netns  string
	args   []string
	cmd    *exec.Cmd
	log    *syncBuffer
	api    string
	exited chan struct{}
	// throttle, when set, makes the process a slow device from its start:
	// it runs for run, then is SIGSTOPped for stop, over and over.
	throttle *throttle
	// exe, when set, is the command line before the flags, in place of
	// bin/swarmd (an arm64 swarmd under qemu-user).
	exe []string
	// env is added to the process's environment.
	env []string
}

type throttle struct{ run, stop time.Duration }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// netnsCmd wraps a command to run inside a network namespace, if any.
func netnsCmd(ns, name string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// startDaemon starts swarmd on loopback with its own data dir and an
// ephemeral API port, and waits until the API answers.
func startDaemon(t testing.TB, netns string, extra ...string) *daemon {
	t.Helper()
	return startDaemonThrottled(t, netns, nil, extra...)
}

// startDaemonThrottled is startDaemon for a slow device (th nil: full speed).
func startDaemonThrottled(t testing.TB, netns string, th *throttle, extra ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, dir: t.TempDir(), netns: netns, throttle: th}
	shareKey(t, d.dir, extra)
	d.args = append([]string{"--data", d.dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0",
		"--log-level", "debug"}, extra...)
	d.start()
	t.Cleanup(d.kill)
	return d
}

// testKeys holds each test's swarm key (hex), by test.
var testKeys sync.Map

// shareKey makes a daemon in dir a member of its test's swarm: one random
// key per test, written into the data dir, as swarmd --join would. Not
// for a daemon whose flags choose otherwise (--swarm-key, --open, --join).
// startFreshDaemon starts one without it: a newly installed peer.
func shareKey(t testing.TB, dir string, args []string) {
	t.Helper()
	for _, a := range args {
		if a == "--swarm-key" || a == "--open" || a == "--join" {
			return
		}
	}
	k, ok := testKeys.Load(t)
	if !ok {
		b := make([]byte, 32)
		rand.Read(b)
		k, _ = testKeys.LoadOrStore(t, hex.EncodeToString(b))
		t.Cleanup(func() { testKeys.Delete(t) })
	}
	if err := os.WriteFile(filepath.Join(dir, "swarm.key"), []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+k.(string)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startFreshDaemon is startDaemon for a peer with no key yet: it makes
// a private swarm of its own at start.
func startFreshDaemon(t testing.TB, netns string, extra ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, dir: t.TempDir(), netns: netns}
	d.args = append([]string{"--data", d.dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0",
		"--log-level", "debug"}, extra...)
	d.start()
	t.Cleanup(d.kill)
	return d
}

func (d *daemon) start() {
	d.t.Helper()
	os.Remove(filepath.Join(d.dir, "api.addr"))
	d.log = &syncBuffer{}
	exe := d.exe
	if exe == nil {
		exe = []string{filepath.Join(bin, "swarmd")}
	}
	d.cmd = netnsCmd(d.netns, exe[0], append(slices.Clone(exe[1:]), d.args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if len(d.env) > 0 {
		d.cmd.Env = append(os.Environ(), d.env...)
	}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.exited) }()
	if th := d.throttle; th != nil {
		go func(p *os.Process, exited chan struct{}) {
			for {
				select {
				case <-exited:
					return
				case <-time.After(th.run):
				}
				p.Signal(syscall.SIGSTOP)
				select {
				case <-exited:
					return
				case <-time.After(th.stop):
				}
				p.Signal(syscall.SIGCONT)
			}
		}(d.cmd.Process, d.exited)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(d.dir, "api.addr")); err == nil && len(b) > 0 {
			d.api = strings.TrimSpace(string(b))
			return
		}
		select {
		case <-d.exited:
			d.t.Fatalf("swarmd exited at start:\n%s", d.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	d.t.Fatalf("swarmd did not start within 60s:\n%s", d.log)
}

// kill sends SIGKILL and waits for the process.
func (d *daemon) kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Kill()
	<-d.exited
	if d.t.Failed() {
		d.t.Logf("swarmd log (%s):\n%s", d.dir, tail(d.log.String(), 60))
	}
}

// stop sends SIGTERM and returns the exit code.
func (d *daemon) stop() int {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		d.t.Fatal("swarmd did not stop within 10s of SIGTERM")
	}
	return d.cmd.ProcessState.ExitCode()
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ctl runs swarmctl against d and returns stdout, stderr and the exit code.
func (d *daemon) ctl(args ...string) (string, string, int) {
	return runCtl(d.netns, append([]string{"--api", d.api}, args...)...)
}

func runCtl(netns string, args ...string) (string, string, int) {
	return runCtlWithin(30*time.Second, netns, args...)
}

// runCtlWithin is runCtl with another limit on swarmctl's run.
func runCtlWithin(limit time.Duration, netns string, args ...string) (string, string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := netnsCmd(netns, filepath.Join(bin, "swarmctl"), args...)
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return out.String(), errb.String(), code
}

// peerID asks the daemon for its ID.
func (d *daemon) peerID() string {
	d.t.Helper()
	var id struct {
		PeerID string   `json:"peer_id"`
		Addrs  []string `json:"addrs"`
	}
	d.ctlJSON(&id, "id")
	return id.PeerID
}

// bootstrapAddr is d's first address with its ID.
func (d *daemon) bootstrapAddr() string {
	d.t.Helper()
	out, _, code := d.ctl("id")
	if code != 0 {
		d.t.Fatalf("swarmctl id: exit %d", code)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Scan()
	sc.Scan()
	return strings.TrimSpace(sc.Text())
}

func (d *daemon) ctlJSON(v any, args ...string) {
	d.t.Helper()
	d.ctlJSONWithin(30*time.Second, v, args...)
}

// ctlJSONWithin is ctlJSON with another limit on swarmctl's run.
func (d *daemon) ctlJSONWithin(limit time.Duration, v any, args ...string) {
	d.t.Helper()
	out, errOut, code := runCtlWithin(limit, d.netns, append([]string{"--api", d.api, "--json"}, args...)...)
	if code != 0 {
		d.t.Fatalf("swarmctl %v: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		d.t.Fatalf("swarmctl %v: %v\n%s", args, err, out)
	}
}

type peerRow struct {
	PeerID string `json:"peer_id"`
	Self   bool   `json:"self"`
	Alive  bool   `json:"alive"`
}

// peers returns d's table as peer ID -> alive.
func (d *daemon) peers() map[string]bool {
	d.t.Helper()
	var ps struct {
		Peers []peerRow `json:"peers"`
	}
	d.ctlJSON(&ps, "peers")
	out := map[string]bool{}
	for _, p := range ps.Peers {
		out[p.PeerID] = p.Alive
	}
	return out
}

// roles returns the roles d sees served by live peers, as role -> the
// number of live peers serving it; flags go to swarmctl (--token).
func (d *daemon) roles(flags ...string) map[string]int {
	d.t.Helper()
	var ps struct {
		Peers []struct {
			Alive bool `json:"alive"`
			Roles []struct {
				Role string `json:"role"`
			} `json:"roles"`
		} `json:"peers"`
	}
	d.ctlJSON(&ps, append([]string{"peers"}, flags...)...)
	out := map[string]int{}
	for _, p := range ps.Peers {
		for _, r := range p.Roles {
			if p.Alive {
				out[r.Role]++
			}
		}
	}
	return out
}

// eventually polls cond until it holds or within passes; returns the time taken.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// newNetns creates a network namespace with multicast-capable loopback
// only, so mDNS traffic never leaves it. It needs root and iproute2.
func newNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("ip (iproute2) is not installed: run scripts/install-deps.sh")
	}
	name := fmt.Sprintf("swe2e-%d-%d", os.Getpid(), time.Now().UnixNano()%100000)
	for _, args := range [][]string{
		{"netns", "add", name},
		{"netns", "exec", name, "ip", "link", "set", "lo", "up"},
		{"netns", "exec", name, "ip", "link", "set", "lo", "multicast", "on"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
			for _, p := range strings.Fields(string(out)) {
				exec.Command("kill", "-9", p).Run()
			}
		}
		exec.Command("ip", "netns", "del", name).Run()
	})
	return name
}

// runSwarmd runs swarmd to completion (for commands that exit by
// themselves) and returns its combined output and exit code.
func runSwarmd(t testing.TB, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "swarmd"), args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("swarmd %v did not exit within 30s:\n%s", args, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}
