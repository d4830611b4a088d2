package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

func runLedger(ctx context.Context, e *env, args []string) error {
	return simple(ctx, e, "ledger", args, func(ctx context.Context) error {
		l, err := e.client.Ledger(ctx)
		if err != nil {
			return err
		}
		return printLedger(e, l, time.Now())
	})
}

func printLedger(e *env, l client.Ledger, now time.Time) error {
	if e.json {
		return printJSON(e.stdout, l)
	}
	rec := "on: a contended role serves the peers that served this one first"
	if !l.Reciprocity {
		rec = "off: requests wait in arrival order"
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "gave %.0f, took %.0f (tokens of a whole model; half-life %s; allowance %.0f)\nreciprocity %s\n\n",
		l.Given, l.Taken, (time.Duration(l.HalfLifeS) * time.Second).String(), l.Allowance, rec)
	if len(l.Accounts) == 0 {
		fmt.Fprintln(w, "no receipts yet: nobody served this peer or was served by it")
		return w.Flush()
	}
	fmt.Fprintln(w, "PEER\tGAVE IT\tTOOK FROM IT\tVOUCHED\tBALANCE\tSTANDING\tLAST")
	for _, a := range l.Accounts {
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.0f\t%+.0f\t%+.2f\t%s ago\n", shortID(a.Peer), a.Given, a.Taken, a.Vouched, a.Balance, a.Standing,
			now.Sub(a.Last).Round(time.Second))
	}
	return w.Flush()
}
