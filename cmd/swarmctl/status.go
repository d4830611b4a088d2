package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"
)

func runStatus(ctx context.Context, e *env, args []string) error {
	fs := e.flags("status")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	st, err := e.client.Status(ctx)
	if err != nil {
		return err
	}
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
	row("private swarm", onOff(st.Private))
	row("heartbeat", fmt.Sprintf("%s (dead after %s)", time.Duration(st.HeartbeatMS)*time.Millisecond,
		time.Duration(st.DeadAfterMS)*time.Millisecond))
	row("bootstrap peers", st.Bootstrap)
	for i, a := range st.ListenAddrs {
		k := ""
		if i == 0 {
			k = "listening"
		}
		row(k, a)
	}
	return w.Flush()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
