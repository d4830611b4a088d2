package swarm

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestConnManagerTakesDHTProtectionAsTag: kad-dht's protection of its
// farthest buckets' peers becomes its tag (so closeIdleConns may close
// them), any other protection stays one, and the manager still decays
// tags (gossipsub's delivery tags need it).
func TestConnManagerTakesDHTProtectionAsTag(t *testing.T) {
	cm, err := NewConnManager(4, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	a, b := peer.ID("a"), peer.ID("b")
	cm.Protect(a, dhtTag)
	if cm.IsProtected(a, "") {
		t.Errorf("kad-dht's protection protects %s", a)
	}
	if ti := cm.GetTagInfo(a); ti == nil || ti.Tags[dhtTag] != dhtTagValue {
		t.Errorf("kad-dht's protection: tags %+v, want %s=%d", ti, dhtTag, dhtTagValue)
	}
	cm.Protect(b, "pubsub:topic")
	cm.Protect(b, dhtTag)
	if !cm.IsProtected(b, "") {
		t.Errorf("a mesh peer is not protected")
	}
	if still := cm.Unprotect(b, dhtTag); !still {
		t.Errorf("removing kad-dht's protection of %s says it is no longer protected", b)
	}
	if still := cm.Unprotect(b, "pubsub:topic"); still {
		t.Errorf("%s still protected after its only protection went", b)
	}
	if _, ok := connmgr.SupportsDecay(cm); !ok {
		t.Errorf("the connection manager does not decay tags")
	}
}
