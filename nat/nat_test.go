package nat

import (
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p"
)

// TestServiceLifecycle: a service closes without having started and
// refuses to start then; started on a host built with its options, it
// reports the host's addresses and itself as local, and closes once.
func TestServiceLifecycle(t *testing.T) {
	idle, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Close(); err != nil {
		t.Fatalf("closing a service never started: %v", err)
	}
	if err := idle.Start(t.Context(), relayTestHost(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v, want ErrClosed", err)
	}
	if st := idle.Status(); st.Reachability != "unknown" || len(st.Announced) != 0 {
		t.Fatalf("status of a service never started: %+v", st)
	}

	s, err := New(Config{Reachability: "private", RelayService: "on", PortMapping: "off"}, nil, WithPrivateSwarm(true))
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(append(s.Options(), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := s.Start(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context(), h); !errors.Is(err, ErrStarted) {
		t.Fatalf("a second Start: %v, want ErrStarted", err)
	}
	if k := s.ConnKind(h.ID()); k != "local" {
		t.Fatalf("ConnKind(self) = %q, want local", k)
	}
	st := s.Status()
	if len(st.Announced) == 0 || st.Relayed || !st.RelayService || st.RelayLimit != "member" {
		t.Fatalf("status %+v: want announced addresses and a member-limit relay service", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// TestWarning: member relay limits warn in a public swarm only.
func TestWarning(t *testing.T) {
	for _, tc := range []struct {
		limit   string
		private bool
		warn    bool
	}{
		{"member", false, true},
		{"member", true, false},
		{"", false, false},
		{"control", false, false},
	} {
		s, err := New(Config{RelayLimit: tc.limit}, nil, WithPrivateSwarm(tc.private))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Warning() != ""; got != tc.warn {
			t.Errorf("relay_limit %q, private %v: warning %q", tc.limit, tc.private, s.Warning())
		}
	}
}
