package node_test

import (
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestReachabilityInStatus: a forced reachability shows in the status API
// with the addresses the peer announces.
func TestReachabilityInStatus(t *testing.T) {
	for _, want := range []string{"public", "private"} {
		cfg := nodetest.Config(t.TempDir())
		cfg.NAT.Reachability = want
		p := nodetest.Start(t, cfg)
		c := client.New(p.APIAddr(), "")
		var st client.Status
		// libp2p starts or stops the relay service on the reachability
		// event, a moment after the reachability itself shows.
		nodetest.Eventually(t, 10*time.Second, "reachability "+want+" and its relay service", func() bool {
			var err error
			st, err = c.Status(t.Context())
			return err == nil && st.NAT.Reachability == want && st.NAT.RelayService == (want == "public")
		})
		if len(st.NAT.Announced) == 0 || st.NAT.Relayed {
			t.Fatalf("%s: announced %v, relayed %v", want, st.NAT.Announced, st.NAT.Relayed)
		}
	}
}
