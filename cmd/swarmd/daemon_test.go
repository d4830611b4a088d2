package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/internal/version"
	"github.com/llmswarm/llmswarm/node"
)

func runSwarmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestUsageErrors: a bad command line or config exits 2 with a message
// naming the problem, and starts nothing.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	numDur := filepath.Join(dir, "num.json")
	os.WriteFile(numDur, []byte(`{"data_dir": "`+dir+`", "heartbeat": 2}`), 0o600)
	data := []string{"--data", dir, "--api", "off", "--no-mdns", "--dht-mode", "off"}
	id, _ := peer.Decode("12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA")
	tok := node.Invite{Key: make([]byte, 32), Peer: id, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/192.0.2.9/tcp/7434")}}.String()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"slots zero", []string{"--slots", "0"}, "--slots 0: want 1..64"},
		{"slots negative", []string{"--slots", "-3"}, "--slots -3"},
		{"slots too many", []string{"--slots", "65"}, "--slots 65"},
		{"threads zero", []string{"--threads", "0"}, "--threads 0"},
		{"duplicate role", []string{"--role", "critic=a.gguf", "--role", "critic=b.gguf"}, "--role critic given twice"},
		{"role without path", []string{"--role", "critic"}, "want ROLE=PATH.gguf"},
		{"unknown role", []string{"--role", "poet=a.gguf"}, `unknown role "poet"`},
		{"bad dht mode", []string{"--dht-mode", "bogus"}, "dht_mode"},
		{"bad bootstrap", []string{"--bootstrap", "/ip4/1.2.3.4/tcp/1"}, "/p2p/PEER_ID"},
		{"bad shard", []string{"--shard", "m.gguf:3-1"}, "want A-B"},
		{"negative heartbeat", []string{"--heartbeat", "-1s"}, "--heartbeat"},
		{"number for a duration", []string{"--config", numDur}, `want a string with a unit, such as "2s"`},
		{"missing config", []string{"--config", filepath.Join(dir, "none.json")}, "none.json"},
		{"unknown flag", []string{"--slot", "2"}, "flag provided but not defined: -slot"},
		{"argument", []string{"serve"}, `unexpected argument "serve"`},
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"bad relay service", []string{"--relay-service", "maybe"}, "nat.relay_service"},
		{"bad reachability", []string{"--reachability", "sometimes"}, "nat.reachability"},
		{"relay without id", []string{"--relay", "/ip4/198.51.100.10/tcp/4001"}, "nat.relays"},
		{"open with a key", []string{"--open", "--swarm-key", filepath.Join(dir, "k")}, "open and swarm_key"},
		{"join as an open peer", []string{"--open", "--join", tok}, "--join: this peer runs an open swarm"},
		{"join with a key file", []string{"--swarm-key", filepath.Join(dir, "k"), "--join", tok}, "a join writes"},
		{"truncated token", []string{"--join", tok[:len(tok)-12]}, "cut short"},
		{"garbage token", []string{"--join", "swarm1-aaaaaaaaaaaaaaaaaaaaaaaa"}, "bad join token"},
		{"not a token", []string{"--join", "12D3KooWabc"}, "does not start with swarm1-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runSwarmd(append(append([]string{}, data...), c.args...)...)
			if code != 2 || !strings.Contains(errs, c.want) {
				t.Fatalf("swarmd %v: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "identity.key")); err == nil {
		t.Fatal("a refused command line created an identity")
	}
}

// TestHelp: -h on swarmd and every subcommand exits 0 and prints the usage,
// naming the positional arguments, on stdout.
func TestHelp(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"Usage:", "-slots", "swarmd model"}},
		{[]string{"--help"}, []string{"Usage:", "-role"}},
		{[]string{"help"}, []string{"Usage:", "-shard"}},
		{[]string{"model", "-h"}, []string{"Usage: swarmd model COMMAND", "slice FILE --layers A-B"}},
		{[]string{"model", "help"}, []string{"Usage: swarmd model COMMAND"}},
		{[]string{"model", "synth", "-h"}, []string{"Usage: swarmd model synth [flags] -o FILE", "-arch"}},
		{[]string{"model", "info", "--help"}, []string{"Usage: swarmd model info [--json] FILE", "-json"}},
		{[]string{"model", "slice", "-h"}, []string{"Usage: swarmd model slice FILE --layers A-B [-o OUT]", "-layers A-B"}},
		{[]string{"bench", "-h"}, []string{"Usage: swarmd bench --model FILE", "-gen"}},
		{[]string{"version", "-h"}, []string{"Usage: swarmd version"}},
	}
	for _, c := range cases {
		code, out, errs := runSwarmd(c.args...)
		if code != 0 {
			t.Errorf("swarmd %v: exit %d, stderr %q", c.args, code, errs)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("swarmd %v: stdout lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runSwarmd("version")
	if want := "swarmd " + version.String() + "\n"; code != 0 || out != want {
		t.Fatalf("version: exit %d, %q; want %q", code, out, want)
	}
	if code, _, errs := runSwarmd("version", "extra"); code != 2 || !strings.Contains(errs, "extra") {
		t.Fatalf("version extra: exit %d, %q", code, errs)
	}
}

// TestNATFlags: the NAT flags land in the config's nat keys, after the
// config file's relays.
func TestNATFlags(t *testing.T) {
	relay := "/ip4/198.51.100.10/tcp/4001/p2p/12D3KooWLiCRy7Nj2kBL6Rp4H3Ub2CnM4wqLRnK6ZCuQ8Qxr1qDU"
	f, _, err := parseDaemonFlags([]string{"--data", t.TempDir(), "--relay", relay, "--relay-service", "on", "--reachability", "private"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.buildConfig()
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.NAT; len(n.Relays) != 1 || n.Relays[0] != relay || n.RelayService != "on" || n.Reachability != "private" {
		t.Fatalf("nat config %+v", n)
	}
}
