package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The UPnP router's public address. miniupnpd maps ports only for a WAN
// address outside every IANA special-purpose range (its addr_is_reserved
// list covers them all, the documentation ranges included; Debian
// bookworm's 2.3.1 has no option to allow one: ext_ip= with such an
// address is a fatal error, and on the interface it answers
// AddPortMapping with 501 ActionFailed). So this router's WAN side is
// renumbered from 198.51.100.2 to an ordinary unicast address; the
// namespaces are linked to nothing outside, so no real host is addressed.
const (
	upnpWAN    = "1.2.3.2"
	upnpWANNet = "1.2.3.0/24"
	inetHostIP = "198.51.100.20"
)

// miniupnpdPath is the miniupnpd binary (Debian installs it in /usr/sbin).
func miniupnpdPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("miniupnpd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/miniupnpd"); err == nil {
		return "/usr/sbin/miniupnpd"
	}
	t.Fatal("miniupnpd is not installed: run scripts/install-deps.sh (Debian package miniupnpd-nftables)")
	return ""
}

// upnpRouter turns tp.nat2 into a home router with UPnP IGD and NAT-PMP:
// its WAN address becomes upnpWAN, it gets the nftables chains miniupnpd
// fills (what Debian's nft_init.sh sets up: the forward chain jumps to
// miniupnpd's, and nat chains jump to its prerouting and postrouting
// ones), and miniupnpd runs inside it with its own config, pid and lease
// files. Returns miniupnpd's log.
func upnpRouter(t *testing.T, tp natTopo, upnp, natpmp bool) *syncBuffer {
	t.Helper()
	exe := miniupnpdPath(t)
	ipRun(t, "-n", tp.nat2, "addr", "del", "198.51.100.2/24", "dev", "wan0")
	ipRun(t, "-n", tp.nat2, "addr", "add", upnpWAN+"/24", "dev", "wan0")
	ipRun(t, "-n", tp.nat2, "route", "add", "198.51.100.0/24", "dev", "wan0")
	ipRun(t, "-n", tp.relay, "route", "add", upnpWANNet, "dev", "eth0")
	nsRun(t, tp.nat2, `table inet filter {
  chain miniupnpd {
  }
  chain prerouting_miniupnpd {
  }
  chain postrouting_miniupnpd {
  }
  chain prerouting { type nat hook prerouting priority dstnat; policy accept;
    jump prerouting_miniupnpd
  }
  chain postrouting { type nat hook postrouting priority srcnat; policy accept;
    jump postrouting_miniupnpd
  }
}
add rule inet filter forward jump miniupnpd
`, "nft", "-f", "-")

	dir := t.TempDir()
	conf := filepath.Join(dir, "miniupnpd.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`ext_ifname=wan0
listening_ip=lan0
http_port=0
enable_upnp=%s
enable_natpmp=%s
secure_mode=yes
ipv6_disable=yes
uuid=6f1b2a4e-3c5d-4e7f-8a9b-0c1d2e3f4a5b
lease_file=%s
minissdpdsocket=%s
allow 1024-65535 203.0.113.0/24 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
`, yesNo(upnp), yesNo(natpmp), filepath.Join(dir, "leases"), filepath.Join(dir, "minissdpd.sock"))), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cmd := netnsCmd(tp.nat2, exe, "-f", conf, "-d", "-v", "-P", filepath.Join(dir, "miniupnpd.pid"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("miniupnpd log:\n%s", tail(log.String(), 40))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	ready := "Listening for NAT-PMP"
	if !natpmp {
		ready = "HTTP listening on port"
	}
	for !strings.Contains(log.String(), ready) {
		select {
		case <-exited:
			t.Fatalf("miniupnpd exited at start:\n%s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("miniupnpd did not start within 10s:\n%s", log)
		}
	}
	if strings.Contains(log.String(), "Port forwarding is impossible") {
		t.Fatalf("miniupnpd refuses to forward ports:\n%s", log)
	}
	return log
}

// internetHost adds a namespace on tp's internet at ip, with a stateful
// firewall: it dials out, and nothing unsolicited comes in.
func internetHost(t *testing.T, tp natTopo, ip string) string {
	t.Helper()
	ns := strings.TrimSuffix(tp.inet, "-i") + "-c"
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				exec.Command("kill", "-9", pid).Run()
			}
		}
		exec.Command("ip", "netns", "del", ns).Run()
	})
	ipRun(t, "netns", "add", ns)
	ipRun(t, "-n", ns, "link", "set", "lo", "up")
	ipRun(t, "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "v-c", "netns", tp.inet)
	ipRun(t, "-n", ns, "link", "set", "eth0", "up")
	ipRun(t, "-n", tp.inet, "link", "set", "v-c", "up")
	ipRun(t, "-n", tp.inet, "link", "set", "v-c", "master", "br0")
	ipRun(t, "-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
	ipRun(t, "-n", ns, "route", "add", upnpWANNet, "dev", "eth0")
	nsRun(t, ns, `table inet filter {
  chain input { type filter hook input priority filter; policy accept;
    iifname "eth0" ct state established,related accept
    iifname "eth0" drop
  }
}
`, "nft", "-f", "-")
	return ns
}

// connsTo returns d's open connections to peer id as "kind direction addr".
func connsTo(d *daemon, id string) []string {
	var out []string
	for _, c := range peerConns(d, id) {
		out = append(out, c.Kind+" "+c.Direction+" "+c.Addr)
	}
	return out
}

// TestNATPortMapping: B sits behind a home router running miniupnpd,
// speaking UPnP IGD only, then NAT-PMP only (libp2p's own NAT-PMP never
// finds the gateway on Linux; swarmd's maps where UPnP did not); with
// nat.port_mapping on B gets a port forward, announces
// the router's public address and the mapped port, and a peer on the
// internet that B never contacted (C: a firewalled host that only dials
// out) connects to it directly there and gets an MoA answer from B's
// role. The router forwards nothing but what miniupnpd added, and B has
// no relay, so the mapping is the only way in.
func TestNATPortMapping(t *testing.T) {
	for _, proto := range []string{"upnp", "nat-pmp"} {
		t.Run(proto, func(t *testing.T) { natPortMapping(t, proto) })
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func natPortMapping(t *testing.T, proto string) {
	tp := newNATTopo(t)
	routerLog := upnpRouter(t, tp, proto == "upnp", proto == "nat-pmp")
	cNS := internetHost(t, tp, inetHostIP)
	model := tinyModel(t)
	public := []string{"198.51.100.0/24"}
	relay := natDaemon(t, tp.relay, relayIP, map[string]any{
		"nat": map[string]any{"reachability": "public", "public_cidrs": public, "port_mapping": "off"}})
	boot := []string{fmt.Sprintf("/ip4/%s/tcp/4001/p2p/%s", relayIP, relay.peerID())}

	start := time.Now()
	b := natDaemon(t, tp.b, lanB, map[string]any{"bootstrap": boot,
		"nat": map[string]any{"reachability": "auto", "public_cidrs": public, "port_mapping": "on"}},
		"--role", "concise="+model)
	up := time.Since(start)
	prefix := "/ip4/" + upnpWAN + "/tcp/"
	var mapped string
	took := eventually(t, 30*time.Second, "B announces a port mapped on its router", func() bool {
		var st natStatus
		b.ctlJSON(&st, "status")
		for _, a := range st.NAT.Announced {
			if strings.HasPrefix(a, prefix) {
				mapped = a
				return true
			}
		}
		return false
	})
	t.Logf("B announces %s %v after it started (API up after %v)", mapped, up+took, up)
	port := strings.TrimPrefix(mapped, prefix)
	out, err := netnsCmd(tp.nat2, "nft", "list", "chain", "inet", "filter", "prerouting_miniupnpd").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dport "+port+" ") || !strings.Contains(string(out), lanB+":4001") {
		t.Fatalf("the router has no forward of port %s to B: %v\n%s\nminiupnpd:\n%s", port, err, out, routerLog)
	}

	// C dials from ephemeral ports, not from its listening port: B, hearing
	// of C through the relay, probes it from B's mapped port, and while that
	// probe's SYN waits at C's firewall, C's dial from port 4001 to the
	// mapped port would be the same 4-tuple, taken by B's connection
	// attempt (a TCP simultaneous open, which libp2p cannot finish). With
	// reuseport, a field peer gets in by hole punching then (docs/nat.md);
	// this test is about the mapping.
	c := natDaemonEnv(t, cNS, "/ip4/"+inetHostIP+"/tcp/4001", []string{"LIBP2P_TCP_REUSEPORT=false"}, map[string]any{"bootstrap": boot,
		"nat": map[string]any{"reachability": "private", "public_cidrs": public, "port_mapping": "off",
			"relay_service": "off"}})
	bID, cID := b.peerID(), c.peerID()
	want := "direct outbound " + mapped
	t0 := time.Now()
	eventually(t, 60*time.Second, "C connected to B at its mapped address", func() bool {
		conns := connsTo(c, bID)
		return len(conns) > 0 && conns[0] == want
	})
	t.Logf("C connected to B at %s %v after C started", mapped, time.Since(t0))
	if conns := connsTo(c, bID); len(conns) != 1 || conns[0] != want {
		t.Fatalf("C's connections to B: %q, want only %q", conns, want)
	}
	for _, cn := range connsTo(b, cID) {
		if !strings.HasPrefix(cn, "direct inbound /ip4/"+inetHostIP+"/") {
			t.Fatalf("B's connections to C: %q, want direct inbound ones from %s", connsTo(b, cID), inetHostIP)
		}
	}
	eventually(t, 30*time.Second, "C sees B alive", func() bool { return c.peers()[bID] })
	// B's record names its role once the model is loaded, which a loaded
	// machine can take a while to do after B is up.
	eventually(t, 60*time.Second, "C sees B's concise role", func() bool { return c.roles()["concise"] > 0 })

	t1 := time.Now()
	res, errOut, code := runCtlWithin(90*time.Second, cNS, "--api", c.api, "--json", "ask", "--mode", "moa",
		"--timeout", "60s", "What does a port mapping do?")
	t.Logf("ask took %v", time.Since(t1))
	if code != 0 {
		t.Fatalf("ask from C: exit %d: %s", code, errOut)
	}
	var ans struct {
		Agents []struct {
			Peer string `json:"peer"`
		} `json:"agent_responses"`
		Final string `json:"final_answer"`
	}
	if err := json.Unmarshal([]byte(res), &ans); err != nil {
		t.Fatalf("ask: %v\n%s", err, res)
	}
	answered := false
	for _, ag := range ans.Agents {
		answered = answered || ag.Peer == bID
	}
	if !answered || ans.Final == "" {
		t.Fatalf("B's role did not answer C: %s", res)
	}
	if conns := connsTo(c, bID); len(conns) != 1 || conns[0] != want {
		t.Fatalf("after the ask, C's connections to B: %q, want only %q", conns, want)
	}
	var st natStatus
	b.ctlJSON(&st, "status")
	t.Logf("B's reachability: %s; announced %v", st.NAT.Reachability, st.NAT.Announced)
}
