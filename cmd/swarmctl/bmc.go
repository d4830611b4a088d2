package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

func runBMC(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "bmc", args, func(ctx context.Context) error {
		b, err := e.client.BMC(ctx)
		if err != nil {
			return err
		}
		return printBMC(e, b)
	})
}

func printBMC(e *env, b client.BMC) error {
	if e.json {
		return printJSON(e.stdout, b)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if t := b.Authority; t != nil {
		fmt.Fprintf(w, "authority %s  age %s  boot %d  seq %d  board uptime %s  dead after %s\n\n", t.Signer,
			ms(t.AgeMS), t.Boot, t.Seq, ms(t.UptimeMS).Round(time.Second), ms(t.DeadAfterMS))
		fmt.Fprintln(w, "NODE\tPEER\tSTATE\tLAST BEAT\tLOAD")
		for _, n := range t.Nodes {
			st := "alive"
			if !n.Alive {
				st = "DEAD"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\t%d\n", n.Handle, orDash(n.PeerID), st, ms(n.AgeMS), n.Load)
		}
		if len(t.Partitions) > 0 {
			fmt.Fprintln(w, "\nNODE\tPEER\tMODEL\tLAYERS")
			for _, p := range t.Partitions {
				model := p.Model
				if p.ModelCID != "" {
					model = shortID(p.ModelCID)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t[%d,%d)\n", p.Node, orDash(p.PeerID), model, p.Start, p.End)
			}
		}
	} else {
		fmt.Fprintln(w, b.Message)
	}
	fmt.Fprintln(w, "\nBMC PEER\tROLE\tLAST TABLE\tBOOT\tSEQ")
	for _, p := range b.Peers {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.PeerID, bmcRole(p), lastTable(p.LastMS), num(p.Boot), num(p.Seq))
	}
	for _, p := range b.Ignored {
		fmt.Fprintf(w, "%s\tignored (not in bmc_peers)\t%s\t-\t-\n", p.PeerID, lastTable(p.LastMS))
	}
	if br := b.Bridge; br != nil {
		state := "connected"
		if !br.Connected {
			state = "not connected"
		}
		rtt := "-"
		if br.RTTMS > 0 {
			rtt = fmt.Sprintf("%.2f ms", br.RTTMS)
		}
		fmt.Fprintf(w, "\nbridge %s: %s, boot %s, rtt %s, %d tables published, last %s\n", br.Path, state,
			num(br.Boot), rtt, br.Published, lastTable(br.LastPublishMS))
		if br.Error != "" {
			fmt.Fprintf(w, "bridge error: %s\n", br.Error)
		}
	}
	return w.Flush()
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return shortID(s)
}

func num(v uint32) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

func lastTable(agoMS int64) string {
	if agoMS < 0 {
		return "never"
	}
	return ms(agoMS).Round(100*time.Millisecond).String() + " ago"
}

func bmcRole(p client.BMCPeer) string {
	switch {
	case p.Authority:
		return "authority"
	case p.Live:
		return "standby"
	case p.LastMS < 0:
		return "silent"
	}
	return "silent (stale)"
}
