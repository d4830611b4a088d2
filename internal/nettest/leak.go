package nettest

import "go.uber.org/goleak"

// Libp2pWorkers are goleak options for the process-wide workers libp2p
// starts once and never stops, for TestMain of packages that run hosts.
func Libp2pWorkers() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/ipfs/go-log/v2/writer.(*MirrorWriter).logRoutine"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/transport/quicreuse.(*reuse).gc"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-flow-metrics.(*sweeper).run"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/resource-manager.(*resourceManager).background"),
		// UPnP/NAT-PMP discovery runs to its own timeout (seconds) even
		// after the host that started it closed.
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/net/nat/internal/nat.discoverNATs.func1"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/net/nat/internal/nat.discoverNATs.func2"),
	}
}
