package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// natTopo is a small internet in network namespaces: a relay on the
// "internet" (198.51.100.0/24, a documentation range, treated as public
// by the peers through nat.public_cidrs), and two LANs (192.0.2.0/24 and
// 203.0.113.0/24), each behind its own NAT router that masquerades and
// silently drops unsolicited traffic, as a home router does. Nothing is
// linked to the root namespace.
type natTopo struct {
	inet, relay, nat1, nat2, a, b string
}

const (
	relayIP = "198.51.100.10"
	lanA    = "192.0.2.10"
	lanB    = "203.0.113.10"
)

func (tp natTopo) all() []string { return []string{tp.inet, tp.relay, tp.nat1, tp.nat2, tp.a, tp.b} }

// topoSeq numbers the topologies of this process.
var topoSeq atomic.Int64

// topoMine holds the namespaces this process created (and not deleted).
var topoMine sync.Map

// topoPrefix is what the names of this process's namespaces begin with.
func topoPrefix() string { return fmt.Sprintf("swn%d.", os.Getpid()) }

// sweepStale deletes the namespaces named as this process's that it did
// not create: a test process killed before its cleanups (a timeout, a
// SIGKILL) leaves its namespaces behind, and pids wrap (pid_max is often
// 32768): a later process given the same pid would find its names taken
// ("ip netns add: File exists") and fail at once.
func sweepStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], topoPrefix()) {
			continue
		}
		if _, mine := topoMine.Load(f[0]); !mine {
			natTopo{inet: f[0]}.down()
		}
	}
}

// down kills what runs in the topology's namespaces and deletes them
// (again: a no-op).
func (tp natTopo) down() {
	for _, ns := range tp.all() {
		if ns == "" {
			continue
		}
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				exec.Command("kill", "-9", pid).Run()
			}
		}
		exec.Command("ip", "netns", "del", ns).Run()
		topoMine.Delete(ns)
	}
}

func ipRun(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func nsRun(t testing.TB, ns string, stdin string, name string, args ...string) {
	t.Helper()
	cmd := netnsCmd(ns, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %s %s: %v\n%s", ns, name, strings.Join(args, " "), err, out)
	}
}

// newNATTopo builds the topology, both NATs port-preserving.
func newNATTopo(t testing.TB) natTopo {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: run scripts/install-deps.sh", tool)
		}
	}
	sweepStale()
	p := fmt.Sprintf("%s%d", topoPrefix(), topoSeq.Add(1))
	tp := natTopo{inet: p + "-i", relay: p + "-r", nat1: p + "-n1", nat2: p + "-n2", a: p + "-a", b: p + "-b"}
	t.Cleanup(tp.down)
	for _, ns := range tp.all() {
		topoMine.Store(ns, true)
		ipRun(t, "netns", "add", ns)
		ipRun(t, "-n", ns, "link", "set", "lo", "up")
	}
	veth := func(ns1, if1, ns2, if2 string) {
		ipRun(t, "link", "add", if1, "netns", ns1, "type", "veth", "peer", "name", if2, "netns", ns2)
		ipRun(t, "-n", ns1, "link", "set", if1, "up")
		ipRun(t, "-n", ns2, "link", "set", if2, "up")
	}
	ipRun(t, "-n", tp.inet, "link", "add", "br0", "type", "bridge")
	ipRun(t, "-n", tp.inet, "link", "set", "br0", "up")
	veth(tp.relay, "eth0", tp.inet, "v-relay")
	veth(tp.nat1, "wan0", tp.inet, "v-nat1")
	veth(tp.nat2, "wan0", tp.inet, "v-nat2")
	for _, v := range []string{"v-relay", "v-nat1", "v-nat2"} {
		ipRun(t, "-n", tp.inet, "link", "set", v, "master", "br0")
	}
	veth(tp.a, "eth0", tp.nat1, "lan0")
	veth(tp.b, "eth0", tp.nat2, "lan0")
	ipRun(t, "-n", tp.relay, "addr", "add", relayIP+"/24", "dev", "eth0")
	router := func(ns, wan, lan, lanNet string) {
		ipRun(t, "-n", ns, "addr", "add", wan+"/24", "dev", "wan0")
		ipRun(t, "-n", ns, "addr", "add", lan+"/24", "dev", "lan0")
		nsRun(t, ns, "", "sysctl", "-qw", "net.ipv4.ip_forward=1")
		nsRun(t, ns, fmt.Sprintf(`table ip nat {
  chain postrouting { type nat hook postrouting priority srcnat; policy accept;
    oifname "wan0" ip saddr %s masquerade
  }
}
table inet filter {
  chain forward { type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname "lan0" oifname "wan0" accept
  }
  chain input { type filter hook input priority filter; policy accept;
    iifname "wan0" ct state established,related accept
    iifname "wan0" drop
  }
}
`, lanNet), "nft", "-f", "-")
	}
	router(tp.nat1, "198.51.100.1", "192.0.2.1", "192.0.2.0/24")
	router(tp.nat2, "198.51.100.2", "203.0.113.1", "203.0.113.0/24")
	ipRun(t, "-n", tp.a, "addr", "add", lanA+"/24", "dev", "eth0")
	ipRun(t, "-n", tp.a, "route", "add", "default", "via", "192.0.2.1")
	ipRun(t, "-n", tp.b, "addr", "add", lanB+"/24", "dev", "eth0")
	ipRun(t, "-n", tp.b, "route", "add", "default", "via", "203.0.113.1")
	return tp
}

// natDaemon starts swarmd in ns listening on ip (TCP port 4001), with cfg
// (nat keys and the rest) as its config file.
func natDaemon(t testing.TB, ns, ip string, cfg map[string]any, extra ...string) *daemon {
	t.Helper()
	return natDaemonOn(t, ns, "/ip4/"+ip+"/tcp/4001", cfg, extra...)
}

// natDaemonOn is natDaemon listening on the multiaddr listen.
func natDaemonOn(t testing.TB, ns, listen string, cfg map[string]any, extra ...string) *daemon {
	t.Helper()
	return natDaemonEnv(t, ns, listen, nil, cfg, extra...)
}

// natDaemonEnv is natDaemonOn with env added to the daemon's environment.
func natDaemonEnv(t testing.TB, ns, listen string, env []string, cfg map[string]any, extra ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, dir: t.TempDir(), netns: ns, env: env}
	b, _ := json.Marshal(cfg)
	conf := filepath.Join(d.dir, "config.json")
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d.args = append([]string{"--data", d.dir, "--config", conf, "--listen", listen,
		"--api", "127.0.0.1:0", "--no-mdns", "--log-level", "debug"}, extra...)
	if !slices.Contains(extra, "--swarm-key") {
		// These tests compare an open swarm with a private one (keyFile),
		// and QUIC takes no key.
		d.args = append(d.args, "--open")
	}
	d.start()
	t.Cleanup(d.kill)
	return d
}

// symmetricNAT makes router ns's masquerade pick a random source port for
// every new connection.
func symmetricNAT(t testing.TB, ns string) {
	t.Helper()
	nsRun(t, ns, "", "nft", "flush", "chain", "ip", "nat", "postrouting")
	nsRun(t, ns, "", "nft", "add", "rule", "ip", "nat", "postrouting", "oifname", "wan0", "masquerade", "random,fully-random")
}

// TestNATTopoStaleNamespaces: namespaces left by a killed test process
// whose pid this one reuses do not stop a topology from being built (they
// made newNATTopo fail at once with "File exists"); they are swept.
func TestNATTopoStaleNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	next := topoSeq.Load() + 1
	var stale []string
	for seq := next; seq < next+3; seq++ {
		p := fmt.Sprintf("%s%d", topoPrefix(), seq)
		for _, suf := range []string{"-i", "-r", "-n1", "-n2", "-a", "-b"} {
			ipRun(t, "netns", "add", p+suf)
			stale = append(stale, p+suf)
		}
	}
	t.Cleanup(func() {
		for _, ns := range stale {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	tp := newNATTopo(t)
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed[f[0]] = true
		}
	}
	for _, ns := range stale {
		if listed[ns] && !slices.Contains(tp.all(), ns) {
			t.Errorf("stale namespace %s is still there", ns)
		}
	}
}
