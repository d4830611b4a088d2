package node

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/llmswarm/llmswarm/internal/engine"

	"github.com/llmswarm/llmswarm/gossip"
)

// selfCapability describes this peer for its heartbeat. The swarm service
// fills in ID, addresses, sequence and time.
func (n *Node) selfCapability() gossip.Capability {
	total, free := memInfo()
	thermal, bat, refusing := n.checkPower()
	c := gossip.Capability{
		Version: Version,
		Platform: gossip.Platform{
			OS: runtime.GOOS, Arch: n.computeArch(), Device: n.cfg.Device,
			Cores: runtime.NumCPU(), RAMBytes: total, FreeRAM: free, GPUs: n.platformGPUs(),
		},
		Thermal: thermal,
		Battery: bat,
	}
	if srv := n.moaServer; srv != nil {
		c.Roles = srv.Roles()
		c.Load.Active, c.Load.Capacity = srv.Load()
		c.Load.Queued = srv.Queue().Waiting
	}
	if p := n.pipe; p != nil {
		c.Shards = p.stages.Shards()
		a, cp := p.stages.Load()
		c.Load.Active += a
		c.Load.Capacity += cp
		c.Load.Queued += p.stages.Queue().Waiting
	}
	if refusing != "" {
		c.Load.Capacity = 0 // gossip.Capability.TakesWork: no new work here
	}
	return c
}

// memInfo reads total and available memory (Linux; zero elsewhere).
func memInfo() (total, avail uint64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	return total, avail
}

// battery reads the first Linux battery; nil where there is none.
func battery() *gossip.Battery { return batteryIn("/sys/class/power_supply") }

// batteryIn reads the first battery (BAT*) under a power_supply dir. It
// counts as charging, that is on power, while Linux says Charging, Full or
// Not charging (a charger plugged in that does not charge it: a charge
// threshold, or an old laptop's worn battery), or Unknown while a mains
// or USB supply is online.
func batteryIn(root string) *gossip.Battery {
	dirs, _ := filepath.Glob(filepath.Join(root, "BAT*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "capacity"))
		if err != nil {
			continue
		}
		pct, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pct < 0 || pct > 100 {
			continue
		}
		st, _ := os.ReadFile(filepath.Join(d, "status"))
		var on bool
		switch strings.TrimSpace(string(st)) {
		case "Charging", "Full", "Not charging":
			on = true
		case "Discharging":
		default:
			on = chargerOnline(root)
		}
		return &gossip.Battery{Percent: pct, Charging: on}
	}
	return nil
}

// chargerOnline reports whether a mains or USB supply under root is online.
func chargerOnline(root string) bool {
	dirs, _ := filepath.Glob(filepath.Join(root, "*"))
	for _, d := range dirs {
		typ, _ := os.ReadFile(filepath.Join(d, "type"))
		switch strings.TrimSpace(string(typ)) {
		case "Mains", "USB", "USB_C", "USB_PD":
			if on, _ := os.ReadFile(filepath.Join(d, "online")); strings.TrimSpace(string(on)) == "1" {
				return true
			}
		}
	}
	return false
}

// queue is the slot queue of every model this peer serves.
func (n *Node) queue() engine.QueueStats {
	var q engine.QueueStats
	if srv := n.moaServer; srv != nil {
		q = q.Add(srv.Queue())
	}
	if p := n.pipe; p != nil {
		q = q.Add(p.stages.Queue())
	}
	return q
}

// computeArch names how this peer computes: its build's (engine.ComputeArch),
// with its GPU backend ("+vulkan") where its models' layers may run on one
// and "+batch" where its stages batch sessions' steps (pipeline.batch), so
// that spot checks compare routes through it as across architectures.
func (n *Node) computeArch() string {
	a := engine.ComputeArch()
	if g := n.gpuComputes(); g != "" {
		a += "+" + g
	}
	if n.cfg.Pipeline.Batch && !n.cfg.Engine.Isolate {
		a += "+batch"
	}
	return a
}
