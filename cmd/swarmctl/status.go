package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

func runStatus(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "status", args, func(ctx context.Context) error {
		st, err := e.client.Status(ctx)
		if err != nil {
			return err
		}
		return printStatus(e, st)
	})
}

func printStatus(e *env, st client.Status) error {
	if e.json {
		return printJSON(e.stdout, st)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(w, "%s\t%v\n", k, v) }
	row("peer", st.PeerID)
	row("version", st.Version)
	row("uptime", (time.Duration(st.UptimeS * float64(time.Second))).Round(time.Second))
	row("peers", fmt.Sprintf("%d alive of %d known", st.PeersAlive, st.PeersKnown))
	row("connections", st.Connections)
	row("dht", fmt.Sprintf("%s, %d in routing table", st.DHTMode, st.DHTPeers))
	row("mdns", onOff(st.MDNS))
	if st.SwarmID != "" {
		row("private swarm", "on, swarm "+st.SwarmID)
	} else {
		row("private swarm", onOff(st.Private)+" (open: anyone who finds this peer may join)")
	}
	row("heartbeat", fmt.Sprintf("%s (dead after %s)", time.Duration(st.HeartbeatMS)*time.Millisecond,
		time.Duration(st.DeadAfterMS)*time.Millisecond))
	row("bootstrap peers", st.Bootstrap)
	if q := st.Queue; q.Limit > 0 {
		row("queue", fmt.Sprintf("%d waiting (limit %d); %d waited, mean %.0f ms, longest %.0f ms",
			q.Waiting, q.Limit, q.Waited, q.MeanWaitMS, q.MaxWaitMS))
	}
	if m := st.Memory; m.MaxBytes > 0 {
		row("memory", fmt.Sprintf("%s of %s serving budget used (%s)", size(m.UsedBytes), size(m.MaxBytes), m.Source))
	}
	for i, line := range gpuLines(st.GPU) {
		k := ""
		if i == 0 {
			k = "gpu"
		}
		row(k, line)
	}
	for i, t := range st.Tasks {
		k := ""
		if i == 0 {
			k = "tasks"
		}
		row(k, taskLine(t))
	}
	if p := powerLine(st.Power); p != "" {
		row("power", p)
	}
	reach := st.NAT.Reachability
	if st.NAT.Relayed {
		reach += ", reachable through a relay"
	}
	if st.NAT.RelayService {
		reach += ", relaying for swarm members (" + st.NAT.RelayLimit + " limits)"
	}
	row("reachability", reach)
	if c := st.NAT.Counters; c.PunchAttempts+c.DirectDials > 0 {
		punch := fmt.Sprintf("%d punched, %d failed attempts, %d direct dials", c.PunchSuccesses, c.PunchFailures, c.DirectDials)
		if c.PunchMSMedian > 0 {
			punch += fmt.Sprintf("; median punch %.1f ms, %.0f ms from relayed to direct", c.PunchMSMedian, c.ToDirectMSMedian)
		}
		row("hole punching", punch)
	}
	if c := st.NAT.Counters; c.RelayReservations+c.RelayCircuits > 0 {
		row("relayed", fmt.Sprintf("%d reservations, %d circuits (%d open, %d refused), %s",
			c.RelayReservations, c.RelayCircuits, c.RelayOpen, c.RelayRefused, mib(c.RelayedBytes)))
	}
	for i, a := range st.NAT.Announced {
		k := ""
		if i == 0 {
			k = "announced"
		}
		row(k, a)
	}
	for i, a := range st.ListenAddrs {
		k := ""
		if i == 0 {
			k = "listening"
		}
		row(k, a)
	}
	if len(st.Warnings) == 0 {
		row("health", "ok")
	}
	for i, warn := range st.Warnings {
		k := ""
		if i == 0 {
			k = "WARNINGS"
		}
		row(k, warn)
	}
	return w.Flush()
}

// gpuLines are the gpu rows: each device with its memory, or where the
// peer looked for GPU backends; none for a swarmd from before GPUs.
func gpuLines(g client.GPUStatus) []string {
	if len(g.Dirs) == 0 && len(g.Devices) == 0 {
		return nil
	}
	if len(g.Devices) == 0 {
		return []string{"none: layers run on the CPU (GPU backends looked for in " + strings.Join(g.Dirs, ", ") + ")"}
	}
	var out []string
	for _, d := range g.Devices {
		out = append(out, fmt.Sprintf("%s %s: %s, %s free of %s, %s held by this peer's models",
			d.Backend, d.Name, d.Description, size(int64(d.FreeBytes)), size(int64(d.TotalBytes)), size(d.HeldBytes)))
	}
	switch {
	case g.Layers == 0:
		out = append(out, "engine.gpu_layers 0: every layer runs on the CPU")
	case g.Layers > 0:
		out = append(out, fmt.Sprintf("engine.gpu_layers %d a model", g.Layers))
	}
	return out
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// powerLine is the power row; "" for a swarmd that reports no power
// state (one from before it did says neither taking_work nor why).
func powerLine(p client.PowerStatus) string {
	if p == (client.PowerStatus{}) {
		return ""
	}
	out := "no battery"
	if b := p.Battery; b != nil {
		out = fmt.Sprintf("battery %d%%", b.Percent)
		if b.Charging {
			out += ", charging"
		}
	}
	if p.Thermal != "" {
		out += ", thermal " + p.Thermal
	}
	if !p.TakingWork {
		out += "; NOT taking new work: " + p.Why
	}
	return out
}

// size writes bytes in GiB from 1 GiB up, else in MiB.
func size(b int64) string {
	if b >= 1<<30 {
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(b)/(1<<30)), ".0") + " GiB"
	}
	return mib(b)
}

// taskLine is a task as status lists it: what, where it is, how far.
func taskLine(t client.Task) string {
	line := t.Kind + " " + t.Name
	switch t.State {
	case "running":
		line += ": " + t.Stage
		switch {
		case t.Unit == "bytes" && t.Total > 0:
			line += fmt.Sprintf(" %.0f%% of %s", 100*float64(t.Done)/float64(t.Total), mib(t.Total))
		case t.Unit == "bytes":
			line += " " + mib(t.Done)
		case t.Unit == "percent":
			line += fmt.Sprintf(" %d%%", t.Done)
		}
		line += fmt.Sprintf(" (for %s)", time.Since(time.UnixMilli(t.StartedMS)).Round(time.Second))
	case "failed":
		line += ": failed: " + t.Error
	default:
		line += ": " + t.State
	}
	return line
}
