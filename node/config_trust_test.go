package node

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTrustConfigKeys(t *testing.T) {
	dir := t.TempDir()
	good := Config{DataDir: dir,
		Gossip: GossipConfig{IPColocationThreshold: 4, IPColocationWeight: -2, IPColocationWhitelist: []string{"10.0.0.0/8", "2001:db8::/32"},
			StreamGrace: Duration(2 * time.Second)},
		PeerTable: PeerTableConfig{MaxPeers: 100, UnprovenShare: 0.25, MaxUnprovenPerSubnet: -1}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Gossip, good.Gossip) || back.PeerTable != good.PeerTable {
		t.Fatalf("round trip: %s -> %+v, %v", b, back, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"positive weight", func(c *Config) { c.Gossip.IPColocationWeight = 1 }, "gossip.ip_colocation_weight"},
		{"negative threshold", func(c *Config) { c.Gossip.IPColocationThreshold = -1 }, "gossip.ip_colocation_threshold"},
		{"bad network", func(c *Config) { c.Gossip.IPColocationWhitelist = []string{"10.0.0.1"} }, "gossip.ip_colocation_whitelist"},
		{"grace too short", func(c *Config) { c.Gossip.StreamGrace = Duration(time.Millisecond) }, "gossip.stream_grace"},
		{"share above 1", func(c *Config) { c.PeerTable.UnprovenShare = 1.5 }, "peer_table.unproven_share"},
		{"negative max", func(c *Config) { c.PeerTable.MaxPeers = -1 }, "peer_table.max_peers"},
		{"per subnet", func(c *Config) { c.PeerTable.MaxUnprovenPerSubnet = -2 }, "peer_table.max_unproven_per_subnet"},
		{"neighbours", func(c *Config) { c.PeerTable.Neighbours = -2 }, "peer_table.neighbours"},
	} {
		c := Config{DataDir: dir}
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
