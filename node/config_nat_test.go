package node

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/nat"
)

// TestNATConfigSection: the config file's "nat" section is nat.Config
// with its keys as they were, round-trips, and its errors surface from
// Config.Validate (nat's own tests check each key).
func TestNATConfigSection(t *testing.T) {
	dir := t.TempDir()
	good := Config{DataDir: dir, NAT: nat.Config{Reachability: "private", RelayService: "off", RelayLimit: "member", HolePunching: "on", PortMapping: "off",
		Relays:      []string{"/ip4/198.51.100.10/tcp/4001/p2p/12D3KooWLiCRy7Nj2kBL6Rp4H3Ub2CnM4wqLRnK6ZCuQ8Qxr1qDU"},
		PublicCIDRs: []string{"198.51.100.0/24"}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(good)
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.NAT, good.NAT) {
		t.Fatalf("round trip: %s -> %+v, %v", b, back.NAT, err)
	}
	var section struct {
		NAT json.RawMessage `json:"nat"`
	}
	if err := json.Unmarshal(b, &section); err != nil {
		t.Fatal(err)
	}
	const want = `{"reachability":"private","relay_service":"off","relay_limit":"member",` +
		`"relays":["/ip4/198.51.100.10/tcp/4001/p2p/12D3KooWLiCRy7Nj2kBL6Rp4H3Ub2CnM4wqLRnK6ZCuQ8Qxr1qDU"],` +
		`"hole_punching":"on","port_mapping":"off","public_cidrs":["198.51.100.0/24"]}`
	if string(section.NAT) != want {
		t.Fatalf("the nat section: %s\nwant %s", section.NAT, want)
	}
	bad := Config{DataDir: dir, NAT: nat.Config{Reachability: "sometimes"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "nat.reachability") {
		t.Fatalf("a bad nat key: %v, want an error naming nat.reachability", err)
	}
}
