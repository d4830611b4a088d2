package swarm

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Process-wide workers libp2p starts once and never stops.
		goleak.IgnoreTopFunction("github.com/ipfs/go-log/v2/writer.(*MirrorWriter).logRoutine"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/transport/quicreuse.(*reuse).gc"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-flow-metrics.(*sweeper).run"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/resource-manager.(*resourceManager).background"),
	)
}
