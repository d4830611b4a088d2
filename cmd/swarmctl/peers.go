package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

func runPeers(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "peers", args, func(ctx context.Context) error {
		ps, err := e.client.Peers(ctx)
		if err != nil {
			return err
		}
		return printPeers(e, ps)
	})
}

func printPeers(e *env, ps client.Peers) error {
	if e.json {
		return printJSON(e.stdout, ps)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PEER\tSTATE\tSEEN\tCONN\tRTT\tPLATFORM\tROLES\tSHARDS\tLOAD")
	for _, p := range ps.Peers {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\n", shortID(p.PeerID), state(p), seen(p),
			connKinds(p), rtt(p), platform(p.Platform), roles(p.Roles), shardList(p.Shards), p.Active, p.Capacity)
	}
	return w.Flush()
}

// shortID keeps a peer ID recognisable: its last 10 characters, as libp2p's
// own ShortString does.
func shortID(id string) string {
	if len(id) <= 12 {
		return id
	}
	return "…" + id[len(id)-10:]
}

func state(p client.Peer) string {
	switch {
	case p.Self:
		return "self"
	case p.Alive:
		return "alive"
	}
	return fmt.Sprintf("dead %s", (time.Duration(p.DeadForMS) * time.Millisecond).Round(time.Second))
}

// connKinds lists the kinds of the open connections to p ("punched",
// "direct", "relayed"), each once.
func connKinds(p client.Peer) string {
	if p.Self {
		return "-"
	}
	var kinds []string
	for _, c := range p.Conns {
		if !slices.Contains(kinds, c.Kind) {
			kinds = append(kinds, c.Kind)
		}
	}
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, "+")
}

func rtt(p client.Peer) string {
	if p.RTTMS <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", p.RTTMS)
}

func seen(p client.Peer) string {
	if p.Self {
		return "-"
	}
	return (time.Duration(p.LastSeenMS) * time.Millisecond).Round(100*time.Millisecond).String() + " ago"
}

func platform(p client.Platform) string {
	s := fmt.Sprintf("%s/%s %dc %s", p.OS, p.Arch, p.Cores, gib(p.RAMBytes))
	if p.Device != "" {
		s = p.Device + " " + s
	}
	return s
}

func gib(b uint64) string { return fmt.Sprintf("%.1fG", float64(b)/(1<<30)) }

func roles(rs []client.Role) string {
	if len(rs) == 0 {
		return "-"
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.Role)
	}
	return strings.Join(out, ",")
}

func shardList(ss []client.Shard) string {
	if len(ss) == 0 {
		return "-"
	}
	var out []string
	for _, s := range ss {
		name := s.ModelName
		if name == "" {
			name = shortID(s.ModelCID)
		}
		out = append(out, fmt.Sprintf("%s[%d,%d)/%d", name, s.Start, s.End, s.Layers))
	}
	return strings.Join(out, ",")
}
