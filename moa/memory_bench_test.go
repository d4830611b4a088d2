package moa

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestFloodVictimProcess is the victim of BenchmarkFrameFlood, in a
// process of its own so that its RSS is its own: an MoA server with
// swarmd's default 256 MiB resource-manager budget. It prints its address
// and runs until its stdin closes. It is skipped unless the benchmark
// starts it.
func TestFloodVictimProcess(t *testing.T) {
	if os.Getenv("MOA_FLOOD_VICTIM") == "" {
		t.Skip("the victim process of BenchmarkFrameFlood")
	}
	h := rcmgrHost(t, 256<<20)
	s := NewServer(h, nil)
	defer s.Close()
	fmt.Printf("victim %s %s\n", h.ID(), h.Addrs()[0])
	io.Copy(io.Discard, os.Stdin)
}

// BenchmarkFrameFlood measures what 12 identities, each with 16 streams
// sending all but the last byte of a 1 MiB request frame, cost a victim
// process: its peak RSS (VmHWM) and its RSS once every frame was sent.
func BenchmarkFrameFlood(b *testing.B) {
	for range b.N {
		victim := exec.Command(os.Args[0], "-test.run=^TestFloodVictimProcess$", "-test.count=1")
		victim.Env = append(os.Environ(), "MOA_FLOOD_VICTIM=1")
		victim.Stderr = os.Stderr
		stdin, _ := victim.StdinPipe()
		out, _ := victim.StdoutPipe()
		if err := victim.Start(); err != nil {
			b.Fatal(err)
		}
		var id peer.ID
		var addr string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "victim" {
				id, _ = peer.Decode(f[1])
				addr = f[2]
				break
			}
		}
		go io.Copy(io.Discard, out)
		ai, err := peer.AddrInfoFromString(addr + "/p2p/" + id.String())
		if err != nil {
			b.Fatal(err)
		}
		rssBefore, _ := procMemKB(victim.Process.Pid, "VmRSS")
		frame := binary.AppendUvarint(nil, maxFrame)
		frame = append(frame, make([]byte, maxFrame-1)...)
		for i := len(frame) - maxFrame + 1; i < len(frame); i++ {
			frame[i] = ' '
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var streams []network.Stream
		for range 12 {
			h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			if err := h.Connect(b.Context(), *ai); err != nil {
				b.Fatal(err)
			}
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, err := h.NewStream(b.Context(), ai.ID, ProtocolID)
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
		wg.Wait()
		rssAfter, _ := procMemKB(victim.Process.Pid, "VmRSS")
		peak, _ := procMemKB(victim.Process.Pid, "VmHWM")
		for _, st := range streams {
			st.Reset()
		}
		stdin.Close()
		victim.Wait()
		b.ReportMetric(float64(peak)/1024, "peak-rss-MiB")
		b.ReportMetric(float64(rssAfter-rssBefore)/1024, "rss-growth-MiB")
	}
}

func procMemKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
