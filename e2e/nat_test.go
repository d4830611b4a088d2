package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

type natStatus struct {
	NAT struct {
		Reachability string   `json:"reachability"`
		Announced    []string `json:"announced"`
		Relayed      bool     `json:"relayed"`
		RelayService bool     `json:"relay_service"`
		RelayLimit   string   `json:"relay_limit"`
		Counters     struct {
			PunchAttempts  int     `json:"punch_attempts"`
			PunchSuccesses int     `json:"punch_successes"`
			PunchFailures  int     `json:"punch_failures"`
			PunchMSMedian  float64 `json:"punch_ms_median"`
			ToDirectMS     float64 `json:"to_direct_ms_median"`
			RelayCircuits  int     `json:"relay_circuits"`
			RelayedBytes   int64   `json:"relayed_bytes"`
		} `json:"counters"`
	} `json:"nat"`
}

// natSwarm is a relay on the internet and two peers behind their NATs:
// with a model of n layers (4 unless set), A holds layers [0,n/2) of it,
// B layers [n/2,n) and a role.
type natSwarm struct {
	tp        natTopo
	relay     *daemon
	a, b      *daemon
	aID, bID  string
	relayAddr string
	started   time.Time
	toRelayed time.Duration // from B's start until both hold a relay slot
	toAlive   time.Duration // until both see each other alive
}

type natSwarmOpts struct {
	model   string // "": peers serve nothing
	layers  int    // the model's layers; 0: 4 (the tiny model)
	keyFile string // set: a private swarm (the relay lets members' traffic through)
	noPunch bool   // hole punching off on A and B
	// swarmRelay: B is not told of the relay, only bootstraps from it,
	// and must find it among the swarm's peers.
	swarmRelay bool
	// relayOn: the relay runs with relay_service "on" and its reachability
	// left to AutoNAT, instead of forced public with relay_service "auto".
	relayOn bool
	quic    bool // every peer listens on QUIC (UDP port 4001) only
}

// startNATSwarm starts the relay, then B and A.
func startNATSwarm(t testing.TB, tp natTopo, o natSwarmOpts) *natSwarm {
	t.Helper()
	public := []string{"198.51.100.0/24"}
	var extra []string
	if o.keyFile != "" {
		extra = []string{"--swarm-key", o.keyFile}
	}
	ns := &natSwarm{tp: tp}
	relayNAT := map[string]any{"reachability": "public", "public_cidrs": public, "port_mapping": "off"}
	if o.relayOn {
		relayNAT = map[string]any{"relay_service": "on", "public_cidrs": public, "port_mapping": "off"}
	}
	transport := "/tcp/4001"
	if o.quic {
		transport = "/udp/4001/quic-v1"
	}
	ns.relay = natDaemonOn(t, tp.relay, "/ip4/"+relayIP+transport, map[string]any{"nat": relayNAT}, extra...)
	ns.relayAddr = fmt.Sprintf("/ip4/%s%s/p2p/%s", relayIP, transport, ns.relay.peerID())
	punch := "on"
	if o.noPunch {
		punch = "off"
	}
	behind := func(netns, ip string, relays []string, args ...string) *daemon {
		return natDaemonOn(t, netns, "/ip4/"+ip+transport, map[string]any{
			"bootstrap": []string{ns.relayAddr},
			"nat": map[string]any{"reachability": "private", "public_cidrs": public, "port_mapping": "off",
				"hole_punching": punch, "relays": relays}}, append(append(args, "--threads", "1"), extra...)...)
	}
	bRelays := []string{ns.relayAddr}
	if o.swarmRelay {
		bRelays = nil
	}
	var aArgs, bArgs []string
	if o.model != "" {
		n := cmp.Or(o.layers, 4)
		bArgs = []string{"--role", "concise=" + o.model, "--shard", fmt.Sprintf("%s:%d-%d", o.model, n/2, n)}
		aArgs = []string{"--shard", fmt.Sprintf("%s:0-%d", o.model, n/2)}
	}
	ns.started = time.Now()
	ns.b = behind(tp.b, lanB, bRelays, bArgs...)
	ns.a = behind(tp.a, lanA, []string{ns.relayAddr}, aArgs...)
	for name, d := range map[string]*daemon{"A": ns.a, "B": ns.b} {
		var st natStatus
		for d.ctlJSON(&st, "status"); !st.NAT.Relayed || st.NAT.Reachability != "private"; d.ctlJSON(&st, "status") {
			if time.Since(ns.started) > 30*time.Second {
				t.Fatalf("%s holds no relay slot after 30 s: %+v", name, st.NAT)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ns.toRelayed = time.Since(ns.started)
	var rs natStatus
	ns.relay.ctlJSON(&rs, "status")
	if (rs.NAT.Reachability != "public" && !o.relayOn) || !rs.NAT.RelayService {
		t.Fatalf("the relay: %+v", rs.NAT)
	}
	ns.aID, ns.bID = ns.a.peerID(), ns.b.peerID()
	eventually(t, 30*time.Second, "A sees B alive", func() bool { return ns.a.peers()[ns.bID] })
	eventually(t, 30*time.Second, "B sees A alive", func() bool { return ns.b.peers()[ns.aID] })
	ns.toAlive = time.Since(ns.started)
	if o.model != "" {
		// B may be alive to A before it announces what it loaded.
		eventually(t, 30*time.Second, "A sees B's role and the model covered", func() bool {
			var sh client.Shards
			var ps client.Peers
			ns.a.ctlJSON(&sh, "shards")
			ns.a.ctlJSON(&ps, "peers")
			role := false
			for _, p := range ps.Peers {
				role = role || p.PeerID == ns.bID && len(p.Roles) > 0
			}
			return role && len(sh.Models) == 1 && sh.Models[0].Covered
		})
	}
	return ns
}

// logStart logs how long joining took.
func (ns *natSwarm) logStart(t testing.TB) {
	t.Logf("after B started: both hold a relay slot at %v, see each other alive at %v",
		ns.toRelayed.Round(time.Millisecond), ns.toAlive.Round(time.Millisecond))
}

// stop kills the daemons (the topology's cleanup kills them too).
func (ns *natSwarm) stop() {
	for _, d := range []*daemon{ns.a, ns.b, ns.relay} {
		d.kill()
	}
}

type peerConn struct {
	Addr      string `json:"addr"`
	Kind      string `json:"kind"`
	Direction string `json:"direction"`
}

// peerConns are d's open connections to the peer id.
func peerConns(d *daemon, id string) []peerConn {
	d.t.Helper()
	var ps struct {
		Peers []struct {
			PeerID string     `json:"peer_id"`
			Conns  []peerConn `json:"conns"`
		} `json:"peers"`
	}
	d.ctlJSON(&ps, "peers")
	for _, p := range ps.Peers {
		if p.PeerID == id {
			return p.Conns
		}
	}
	return nil
}

// connKinds are the kinds of d's open connections to the peer id.
func connKinds(d *daemon, id string) []string {
	var out []string
	for _, c := range peerConns(d, id) {
		out = append(out, c.Kind)
	}
	return out
}

// punchedAddr is the address of d's punched connection to id, if any.
func punchedAddr(d *daemon, id string) string {
	for _, c := range peerConns(d, id) {
		if c.Kind == "punched" {
			return c.Addr
		}
	}
	return ""
}

// askMoA asks A's swarm in MoA mode and checks B's role answered; it
// returns how A reached B.
func (ns *natSwarm) askMoA(t testing.TB, what string) string {
	t.Helper()
	t0 := time.Now()
	out, errOut, code := runCtlWithin(90*time.Second, ns.a.netns, "--api", ns.a.api, "--json", "ask", "--mode", "moa",
		"--timeout", "60s", "What is a relay?")
	if code != 0 {
		ns.dumpLogs(t)
		t.Fatalf("%s: MoA ask from A: exit %d: %s", what, code, errOut)
	}
	var res struct {
		Agents []struct {
			Peer  string `json:"peer"`
			Conn  string `json:"conn"`
			Error string `json:"error"`
		} `json:"agent_responses"`
		Final string `json:"final_answer"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%s: ask: %v\n%s", what, err, out)
	}
	conn := ""
	for _, ag := range res.Agents {
		if ag.Peer == ns.bID && ag.Error == "" {
			conn = ag.Conn
		}
	}
	if conn == "" || res.Final == "" {
		t.Fatalf("%s: B's role did not answer A, or the answer does not say how B was reached: %s", what, out)
	}
	t.Logf("%s: MoA answered by B (%s) in %v", what, conn, time.Since(t0).Round(time.Millisecond))
	return conn
}

// askPipeline runs the 2-stage pipeline A|B from A and checks its tokens
// are want's; it returns how A reached B.
func (ns *natSwarm) askPipeline(t testing.TB, what, prompt string, want []int32) string {
	t.Helper()
	var res struct {
		Pipeline struct {
			Tokens    []int32 `json:"tokens"`
			DecodeTPS float64 `json:"decode_tok_s"`
			Hops      []struct {
				Peer       string  `json:"peer"`
				Conn       string  `json:"conn"`
				TransferMS float64 `json:"transfer_ms_per_token"`
			} `json:"hops"`
		} `json:"pipeline"`
	}
	out, errOut, code := runCtlWithin(90*time.Second, ns.a.netns, append([]string{"--api", ns.a.api, "--json"},
		append(pipeAsk, "--timeout", "60s", prompt)...)...)
	if code != 0 {
		ns.dumpLogs(t)
		t.Fatalf("%s: pipeline ask from A: exit %d: %s", what, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
	p := res.Pipeline
	if len(p.Hops) != 2 || p.Hops[0].Peer != ns.aID || p.Hops[1].Peer != ns.bID {
		t.Fatalf("%s: route %+v, want A then B", what, p.Hops)
	}
	if !slices.Equal(p.Tokens, want) {
		t.Fatalf("%s: tokens differ from one machine's:\n got %v\nwant %v", what, p.Tokens, want)
	}
	t.Logf("%s: pipeline A|B gave one machine's %d tokens, %.1f tok/s, A→B %s, transfer %.2f ms/token",
		what, len(p.Tokens), p.DecodeTPS, p.Hops[1].Conn, p.Hops[1].TransferMS)
	return p.Hops[1].Conn
}

func (ns *natSwarm) dumpLogs(t testing.TB) {
	for name, d := range map[string]*daemon{"A": ns.a, "B": ns.b} {
		for _, l := range strings.Split(d.log.String(), "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "nat:") ||
				strings.Contains(l, "pipeline") || strings.Contains(l, "moa") {
				t.Log(name + ": " + l)
			}
		}
	}
}

// pipeReference runs the whole tiny model on one daemon (outside the NAT
// topology) and returns a prompt with 24 varied tokens, and the tokens.
func pipeReference(t testing.TB, model string) (string, []int32) {
	t.Helper()
	d := startDaemon(t, "", "--no-mdns", "--threads", "1", "--shard", model+":0-4")
	defer d.kill()
	var res pipeResult
	for _, p := range pipePrompts {
		d.ctlJSON(&res, append(pipeAsk, p)...)
		distinct := map[int32]bool{}
		for _, w := range res.Pipeline.Tokens {
			distinct[w] = true
		}
		if len(res.Pipeline.Tokens) == 24 && len(distinct) >= 4 {
			return p, res.Pipeline.Tokens
		}
	}
	t.Fatalf("no prompt gives 24 varied reference tokens (last: %v)", res.Pipeline.Tokens)
	return "", nil
}

// TestNATPunch: two peers behind port-preserving NATs that drop
// unsolicited traffic meet through the relay, then hole punching makes
// their connection direct. An MoA question from A is answered by B's role,
// and the pipeline A|B gives one machine's tokens over the punched
// connection. Then the relay is killed: the asks keep working.
func TestNATPunch(t *testing.T) {
	model := tinyModel(t)
	prompt, want := pipeReference(t, model)
	for _, transport := range []string{"tcp", "quic"} {
		t.Run(transport, func(t *testing.T) { natPunch(t, model, transport, prompt, want) })
	}
}

func natPunch(t *testing.T, model, transport, prompt string, want []int32) {
	ns := startNATSwarm(t, newNATTopo(t), natSwarmOpts{model: model, quic: transport == "quic"})
	ns.logStart(t)
	addr := ""
	took := eventually(t, 30*time.Second, "a punched connection from A to B", func() bool {
		addr = punchedAddr(ns.a, ns.bID)
		return addr != ""
	})
	t.Logf("A reaches B directly (punched, %s) %v after B started (%v after polling began)", addr,
		time.Since(ns.started).Round(time.Millisecond), took.Round(time.Millisecond))
	if quic := strings.Contains(addr, "/quic-v1"); quic != (transport == "quic") {
		t.Fatalf("punched %s, want %s", addr, transport)
	}
	var bs natStatus
	ns.b.ctlJSON(&bs, "status")
	if c := bs.NAT.Counters; c.PunchSuccesses < 1 || c.PunchMSMedian <= 0 || c.ToDirectMS < c.PunchMSMedian {
		t.Fatalf("B's counters show no successful punch, or no time to it: %+v", c)
	}
	t.Logf("B's punch counters: %+v", bs.NAT.Counters)

	if conn := ns.askMoA(t, "punched"); conn != "punched" {
		t.Fatalf("A asked B over %q, want the punched connection", conn)
	}
	if conn := ns.askPipeline(t, "punched", prompt, want); conn != "punched" {
		t.Fatalf("A reached B over %q, want the punched connection", conn)
	}

	ns.relay.kill()
	// Past the dead-after time: liveness now runs over the punched path.
	time.Sleep(7 * time.Second)
	if !ns.a.peers()[ns.bID] || !ns.b.peers()[ns.aID] {
		t.Fatal("A and B lost each other when the relay died")
	}
	ns.askMoA(t, "relay killed")
	ns.askPipeline(t, "relay killed", prompt, want)
}

// TestNATSymmetric: B's NAT picks a random source port for every
// connection (a symmetric NAT, as many carrier NATs are), so hole punching
// fails and A reaches B only through the relay, which B found among the
// swarm's peers (it bootstraps from it but is not told it relays; the
// relay runs with relay_service "on", whatever AutoNAT says).
//   - In a private swarm the relay lets members' traffic through: the MoA
//     question and the pipeline A|B succeed over the relay, with one
//     machine's tokens.
//   - In a public swarm the relay keeps control limits, which carry the
//     MoA question and its answer; A does not route a pipeline through B
//     there (the relay would cut it), and says so.
func TestNATSymmetric(t *testing.T) {
	model := tinyModel(t)
	prompt, want := pipeReference(t, model)
	for _, private := range []bool{true, false} {
		name, limit, key := "public", "control", ""
		if private {
			name, limit, key = "private", "member", swarmKeyFile(t)
		}
		t.Run(name, func(t *testing.T) {
			tp := newNATTopo(t)
			symmetricNAT(t, tp.nat2)
			ns := startNATSwarm(t, tp, natSwarmOpts{model: model, keyFile: key, swarmRelay: true, relayOn: true})
			ns.logStart(t)
			eventually(t, 30*time.Second, "B's hole punch to fail", func() bool {
				var bs natStatus
				ns.b.ctlJSON(&bs, "status")
				return bs.NAT.Counters.PunchFailures > 0
			})
			if kinds := connKinds(ns.a, ns.bID); slices.Contains(kinds, "punched") || slices.Contains(kinds, "direct") {
				t.Fatalf("A reaches B through a symmetric NAT directly: %v", kinds)
			}
			var rs natStatus
			ns.relay.ctlJSON(&rs, "status")
			if rs.NAT.RelayLimit != limit {
				t.Fatalf("the relay's limits: %q, want %q", rs.NAT.RelayLimit, limit)
			}
			if conn := ns.askMoA(t, "relayed"); conn != "relayed" {
				t.Fatalf("A asked B over %q, want the relay", conn)
			}
			if private {
				if conn := ns.askPipeline(t, "relayed", prompt, want); conn != "relayed" {
					t.Fatalf("A reached B over %q, want the relay", conn)
				}
			} else {
				// The relay's 128 KiB would cut a generation: A does not
				// route through B, and says which layers nobody else holds.
				_, errOut, code := runCtlWithin(60*time.Second, ns.a.netns, append([]string{"--api", ns.a.api},
					append(pipeAsk, "--timeout", "10s", prompt)...)...)
				if code == 0 || !strings.Contains(errOut, "[2,4)") {
					t.Fatalf("pipeline through a control-limited relay: exit %d, %q; want a refusal naming [2,4)", code, errOut)
				}
				t.Logf("pipeline through a control-limited relay refused: %s", strings.TrimSpace(errOut))
			}
			ns.relay.ctlJSON(&rs, "status")
			if rs.NAT.Counters.RelayCircuits < 1 || rs.NAT.Counters.RelayedBytes < 1 {
				t.Fatalf("the relay's counters: %+v", rs.NAT.Counters)
			}
			t.Logf("the relay's counters: %+v", rs.NAT.Counters)
		})
	}
}

// swarmKeyFile writes a private swarm's key.
func swarmKeyFile(t testing.TB) string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "swarm.key")
	if err := os.WriteFile(key, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+strings.Repeat("5a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return key
}

// TestNATPunchedPathDies: mid-generation, A's NAT starts dropping
// everything between A and B's NAT (the punched path), while the relay
// still reaches both. The pipeline A|B notices the hung hop, fails over
// to B through the relay (a private swarm: its relay carries members'
// traffic), and the text is the undisturbed one.
func TestNATPunchedPathDies(t *testing.T) {
	t.Run("f32", func(t *testing.T) { punchedPathDies(t, natSwarmOpts{model: tinyModel(t)}) })
	// Quantized weights, as phones and Pis run them.
	t.Run("q4_k", func(t *testing.T) {
		punchedPathDies(t, natSwarmOpts{model: synthModel(t, "qwen3", "small", "q4_k"), layers: 8})
	})
}

func punchedPathDies(t *testing.T, o natSwarmOpts) {
	tp := newNATTopo(t)
	o.keyFile = swarmKeyFile(t)
	ns := startNATSwarm(t, tp, o)
	eventually(t, 30*time.Second, "a punched connection from A to B", func() bool {
		return slices.Contains(connKinds(ns.a, ns.bID), "punched")
	})
	args := []string{"--api", ns.a.api, "ask", "--mode", "pipeline", "--dtype", "f32", "--repeat-penalty", "1.5",
		"--max-tokens", "600", "--timeout", "90s"}
	var prompt, want string
	for _, p := range pipePrompts {
		var res struct {
			Final    string `json:"final_answer"`
			Pipeline struct {
				Done string `json:"done"`
			} `json:"pipeline"`
		}
		out, errOut, code := runCtlWithin(60*time.Second, ns.a.netns, append(append([]string{"--json"}, args...), p)...)
		if code != 0 {
			t.Fatalf("reference ask: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		if res.Pipeline.Done == "length" {
			prompt, want = p, res.Final
			break
		}
	}
	if prompt == "" {
		t.Fatal("no prompt runs 600 tokens without ending")
	}

	cmd := netnsCmd(ns.a.netns, filepath.Join(bin, "swarmctl"), append(append(args, "--trace"), prompt)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	var got strings.Builder
	buf := make([]byte, 256)
	cut := false
	for {
		n, err := stdout.Read(buf)
		got.Write(buf[:n])
		if !cut && got.Len() > 200 {
			// The punched path: A's LAN address and port to B's NAT.
			nsRun(t, tp.nat1, "", "nft", "insert", "rule", "inet", "filter", "forward", "ip", "daddr", "198.51.100.2", "drop")
			nsRun(t, tp.nat1, "", "nft", "insert", "rule", "inet", "filter", "forward", "ip", "saddr", "198.51.100.2", "drop")
			cut = true
			t.Logf("cut the punched path after %d bytes of text", got.Len())
		}
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		ns.dumpLogs(t)
		t.Fatalf("ask after the punched path died: %v\n%s", err, stderr.String())
	}
	if !cut {
		t.Fatal("the generation ended before the path was cut")
	}
	if strings.TrimSpace(got.String()) != strings.TrimSpace(want) {
		t.Fatalf("text after the failover differs from the undisturbed run:\n got %q\nwant %q\n%s", got.String(), want, stderr.String())
	}
	var hops []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "re-route") || strings.Contains(l, "route ") || strings.Contains(l, "hop ") || strings.Contains(l, "pipeline,") {
			t.Log(l)
		}
		if strings.HasPrefix(l, "hop ") {
			hops = append(hops, l)
		}
	}
	// Two routes of two hops: A then B punched, A then B relayed.
	if len(hops) != 4 || !strings.HasSuffix(hops[1], ", punched") || !strings.HasSuffix(hops[3], ", relayed") {
		t.Fatalf("the trace does not show B reached punched, then relayed after the failover:\n%s", stderr.String())
	}
}
