package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func allAlive(d *daemon, ids ...string) bool {
	ps := d.peers()
	for _, id := range ids {
		if !ps[id] {
			return false
		}
	}
	return true
}

// TestMDNSDiscovery: three daemons on one LAN (a namespace of their own)
// find each other by mDNS alone, with no bootstrap.
func TestMDNSDiscovery(t *testing.T) {
	ns := newNetns(t)
	var ds []*daemon
	var ids []string
	for i := 0; i < 3; i++ {
		d := startDaemon(t, ns)
		ds = append(ds, d)
		ids = append(ids, d.peerID())
	}
	took := eventually(t, 5*time.Second, "all peers listed alive through mDNS", func() bool {
		for _, d := range ds {
			if !allAlive(d, ids...) {
				return false
			}
		}
		return true
	})
	t.Logf("mDNS: 3 daemons list each other after %s", took)
	out, _, code := ds[0].ctl("peers")
	if code != 0 || strings.Count(out, "alive") != 2 || !strings.Contains(out, "self") {
		t.Fatalf("swarmctl peers (exit %d):\n%s", code, out)
	}
}

// TestBootstrapDeadAndBack: with mDNS off, daemons join through
// --bootstrap; a kill -9'd daemon is marked dead within 8 s and alive again
// after it restarts on the same data dir.
func TestBootstrapDeadAndBack(t *testing.T) {
	first := startDaemon(t, "", "--no-mdns")
	boot := first.bootstrapAddr()
	ds := []*daemon{first, startDaemon(t, "", "--no-mdns", "--bootstrap", boot),
		startDaemon(t, "", "--no-mdns", "--bootstrap", boot)}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.peerID())
	}
	took := eventually(t, 5*time.Second, "all peers listed alive through bootstrap", func() bool {
		for _, d := range ds {
			if !allAlive(d, ids...) {
				return false
			}
		}
		return true
	})
	t.Logf("bootstrap: 3 daemons list each other after %s", took)

	victim := ds[2]
	victim.kill()
	took = eventually(t, 15*time.Second, "killed daemon shown dead", func() bool {
		ps := first.peers()
		alive, known := ps[ids[2]]
		return known && !alive
	})
	t.Logf("kill -9: daemon shown dead after %s", took)
	out, _, _ := first.ctl("peers")
	if !strings.Contains(out, "dead") {
		t.Fatalf("swarmctl peers does not show the dead peer:\n%s", out)
	}

	victim.start()
	if got := victim.peerID(); got != ids[2] {
		t.Fatalf("restarted daemon has ID %s, want %s", got, ids[2])
	}
	took = eventually(t, 8*time.Second, "restarted daemon alive again", func() bool { return allAlive(first, ids[2]) })
	t.Logf("restart: daemon alive again after %s", took)
	if code := first.stop(); code != 0 {
		t.Fatalf("swarmd exit code after SIGTERM: %d", code)
	}
}

// TestBadInput: usage errors exit 2, runtime errors 1, each naming the problem.
func TestBadInput(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	badJSON := filepath.Join(dir, "bad.json")
	os.WriteFile(badJSON, []byte(`{"listen": [`), 0o600)
	typo := filepath.Join(dir, "typo.json")
	os.WriteFile(typo, []byte(`{"bootstarp": []}`), 0o600)
	fileNotDir := filepath.Join(dir, "file")
	os.WriteFile(fileNotDir, nil, 0o600)
	base := []string{"--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0"}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"--frobnicate"}, 2, "frobnicate"},
		{"stray argument", []string{"serve"}, 2, `"serve"`},
		{"bad config json", append([]string{"--config", badJSON}, base...), 2, badJSON},
		{"unknown config key", append([]string{"--config", typo}, base...), 2, "bootstarp"},
		{"missing config", append([]string{"--config", "/nonexistent.json"}, base...), 2, "/nonexistent.json"},
		{"malformed bootstrap", append([]string{"--data", t.TempDir(), "--bootstrap", "/ip4/10.0.0.1/tcp"}, base...), 2, "/ip4/10.0.0.1/tcp"},
		{"bootstrap without id", append([]string{"--data", t.TempDir(), "--bootstrap", "/ip4/127.0.0.1/tcp/1"}, base...), 2, "/p2p/"},
		{"bad log level", []string{"--log-level", "loud"}, 2, "loud"},
		{"api port in use", []string{"--data", t.TempDir(), "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", busy.Addr().String()}, 1, busy.Addr().String()},
		{"libp2p port in use", []string{"--data", t.TempDir(), "--no-mdns", "--api", "127.0.0.1:0", "--listen", "/ip4/127.0.0.1/tcp/" + portOf(busy)}, 1, "address already in use"},
		{"data dir is a file", append([]string{"--data", fileNotDir}, base...), 1, fileNotDir},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runSwarmd(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("swarmd %v: exit %d, want %d with %q in:\n%s", tc.args, code, tc.code, tc.want, out)
			}
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("swarmd crashed:\n%s", out)
			}
		})
	}

	// swarmctl with no daemon at the address.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	_, errOut, code := runCtl("", "--api", addr, "peers")
	if code != 1 || !strings.Contains(errOut, "swarmd is not running at "+addr) {
		t.Fatalf("swarmctl without daemon: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runCtl("", "bogus"); code != 2 || !strings.Contains(errOut, "bogus") {
		t.Fatalf("swarmctl bogus: exit %d, stderr %q", code, errOut)
	}
}

func portOf(l net.Listener) string {
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}
