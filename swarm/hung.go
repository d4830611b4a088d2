package swarm

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// hungSet holds the peers a call found hung (Watch: no progress, no answer
// to a ping). They stay out of routes until one answers a ping again
// (View.RecheckHung): the next question must not pay the detection again
// for a peer still frozen, nor fetch a reference layer from it.
type hungSet struct {
	mu sync.Mutex
	m  map[peer.ID]*hungMark
}

type hungMark struct {
	since    time.Time
	checking bool // a ping of it is in flight
}

// MarkHung records that a call found id hung: it is not Routable until it
// answers a ping (RecheckHung).
func (v *View) MarkHung(id peer.ID) {
	if id == "" || id == v.self {
		return
	}
	v.hung.mu.Lock()
	defer v.hung.mu.Unlock()
	if v.hung.m == nil {
		v.hung.m = map[peer.ID]*hungMark{}
	}
	if _, ok := v.hung.m[id]; !ok {
		v.hung.m[id] = &hungMark{since: time.Now()}
	}
}

// Hung reports whether id was found hung and has not answered a ping
// since.
func (v *View) Hung(id peer.ID) bool {
	v.hung.mu.Lock()
	defer v.hung.mu.Unlock()
	_, ok := v.hung.m[id]
	return ok
}

// RecheckHung pings, in the background, each peer found hung that no ping
// is checking now; one that answers within timeout is routable again. It
// does not wait: the routes planned meanwhile leave the peer out. A peer
// the table forgot is forgotten here too.
func (v *View) RecheckHung(h host.Host, timeout time.Duration) {
	if h == nil {
		return
	}
	v.hung.mu.Lock()
	defer v.hung.mu.Unlock()
	for id, mk := range v.hung.m {
		if mk.checking {
			continue
		}
		if _, known := v.Get(id); !known {
			delete(v.hung.m, id)
			continue
		}
		mk.checking = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := Ping(ctx, h, id)
			cancel()
			v.hung.mu.Lock()
			defer v.hung.mu.Unlock()
			if err == nil && v.hung.m[id] == mk {
				delete(v.hung.m, id)
				return
			}
			mk.checking = false
		}()
	}
}
