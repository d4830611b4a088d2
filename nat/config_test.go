package nat

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestConfigKeys(t *testing.T) {
	good := Config{Reachability: "private", RelayService: "off", RelayLimit: "member", RelayUnproven: 8, HolePunching: "on", PortMapping: "off",
		Relays:      []string{"/ip4/198.51.100.10/tcp/4001/p2p/12D3KooWLiCRy7Nj2kBL6Rp4H3Ub2CnM4wqLRnK6ZCuQ8Qxr1qDU"},
		PublicCIDRs: []string{"198.51.100.0/24"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("the zero config: %v", err)
	}
	b, _ := json.Marshal(good)
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, good) {
		t.Fatalf("round trip: %s -> %+v, %v", b, back, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"reachability", func(c *Config) { c.Reachability = "sometimes" }, "nat.reachability"},
		{"relay service", func(c *Config) { c.RelayService = "yes" }, "nat.relay_service"},
		{"relay limit", func(c *Config) { c.RelayLimit = "unlimited" }, "nat.relay_limit"},
		{"hole punching", func(c *Config) { c.HolePunching = "true" }, "nat.hole_punching"},
		{"port mapping", func(c *Config) { c.PortMapping = "upnp" }, "nat.port_mapping"},
		{"relay without id", func(c *Config) { c.Relays = []string{"/ip4/198.51.100.10/tcp/4001"} }, "nat.relays"},
		{"relay not a multiaddr", func(c *Config) { c.Relays = []string{"relay.example:4001"} }, "nat.relays"},
		{"cidr", func(c *Config) { c.PublicCIDRs = []string{"198.51.100.1"} }, "nat.public_cidrs"},
		{"relay unproven below -1", func(c *Config) { c.RelayUnproven = -2 }, "nat.relay_unproven"},
		{"relay unproven too many", func(c *Config) { c.RelayUnproven = 5000 }, "nat.relay_unproven"},
	} {
		var c Config
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
