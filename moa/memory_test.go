package moa

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// rcmgrHost is a host whose resource manager has a budget of mem bytes,
// with the MoA limits a swarmd peer has.
func rcmgrHost(t *testing.T, mem int64) host.Host {
	t.Helper()
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	AddLimits(&limits)
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.Scale(mem, 1024)))
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.ResourceManager(rm))
	if err != nil {
		rm.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// liveHeap is the Go heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestLargeFramesBoundedByBudget: 12 identities each open 8 request
// streams and send all but the last byte of a maximal (1 MiB) frame,
// then hold the streams open, as a slowloris would. The server reserves
// every frame from the stream's resource scope before reading it: what
// the budget cannot hold is refused at once with "busy" and a clear
// message, and the frames it holds stay within the MoA protocol's
// memory limit, where they once took 12 × 8 MiB.
func TestLargeFramesBoundedByBudget(t *testing.T) {
	const budget = 256 << 20 // memory_limit_mb's default
	srv := rcmgrHost(t, budget)
	s := NewServer(srv, nil)
	t.Cleanup(func() { s.Close() })
	protoLimit := rcmgr.BaseLimit{Memory: 16 << 20}.Memory + (64<<20)*int64(budget>>20)>>10

	frame := make([]byte, binary.MaxVarintLen64+maxFrame)
	n := binary.PutUvarint(frame, maxFrame)
	frame = frame[:n+maxFrame-1] // never complete
	for i := n; i < len(frame); i++ {
		frame[i] = ' '
	}
	heap0 := liveHeap()
	var streams []network.Stream
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 12 {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if err := h.Connect(t.Context(), peer.AddrInfo{ID: srv.ID(), Addrs: srv.Addrs()}); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := h.NewStream(t.Context(), srv.ID(), ProtocolID)
				if err != nil {
					return
				}
				mu.Lock()
				streams = append(streams, st)
				mu.Unlock()
				st.Write(frame)
			}()
		}
	}
	// Every write has returned: the server read each frame but its last
	// byte, into a buffer it holds, or refused it and discarded the bytes.
	wg.Wait()
	heap1 := liveHeap()
	// While the flood holds its share, an honest peer's ordinary request
	// is still read (it fails only for want of the role).
	honest, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { honest.Close() })
	honest.Peerstore().AddAddrs(srv.ID(), srv.Addrs(), time.Minute)
	_, err = Call(t.Context(), honest, srv.ID(), &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "hi"}}}, nil)
	if !errors.Is(err, ErrNoRole) {
		t.Fatalf("an honest request during the flood: %v, want no_role", err)
	}
	// Now the replies: the held frames end short (bad_request), the
	// refused ones were answered busy at once.
	var held, refused atomic.Int64
	for _, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer st.Reset()
			st.CloseWrite()
			rep, err := DecodeReply(bufio.NewReader(st))
			switch {
			case err != nil:
			case rep.Type == ReplyError && rep.Error.Code == CodeBusy && strings.Contains(rep.Error.Message, "no memory budget"):
				refused.Add(1)
			default:
				held.Add(1)
			}
		}()
	}
	wg.Wait()
	grew := int64(heap1) - int64(heap0)
	t.Logf("12 identities x 8 streams of 1 MiB frames: %d held to the end, %d refused; Go heap +%.1f MiB (MoA limit %d MiB, budget %d MiB; BenchmarkFrameFlood measures a victim process's RSS)",
		held.Load(), refused.Load(), float64(grew)/(1<<20), protoLimit>>20, budget>>20)
	if refused.Load() == 0 {
		t.Fatal("nothing refused: frames are not reserved from the budget")
	}
	if grew > protoLimit+16<<20 {
		t.Fatalf("the heap grew %d MiB, beyond the MoA limit (%d MiB) plus slack", grew>>20, protoLimit>>20)
	}
}

// TestFrameReadGrowsWithData: a frame announced large but cut short costs
// what arrived, and a budget that refuses leaves the frame unread.
func TestFrameReadGrowsWithData(t *testing.T) {
	var b bytes.Buffer
	b.Write(binary.AppendUvarint(nil, maxFrame))
	b.WriteString(`{"role":`)
	var req Request
	if err := readFrame(bufio.NewReader(&b), &req, nil, 0); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("short frame: %v", err)
	}
	b.Reset()
	b.Write(binary.AppendUvarint(nil, 10))
	b.WriteString(`{"role":1}`)
	if err := readFrame(bufio.NewReader(&b), &req, refusing{}, 0); err == nil || !strings.Contains(err.Error(), "no memory budget") {
		t.Fatalf("refused budget: %v", err)
	}
}

type refusing struct{}

func (refusing) ReserveMemory(int, uint8) error { return network.ErrResourceLimitExceeded }
func (refusing) ReleaseMemory(int)              {}
