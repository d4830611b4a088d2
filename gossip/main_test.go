package gossip_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/llmswarm/llmswarm/internal/nettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, nettest.Libp2pWorkers()...) }
