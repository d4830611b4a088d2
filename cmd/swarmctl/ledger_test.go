package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

// TestPrintLedger: the table shows each account's figures, signed, and
// the totals; an empty ledger says why it is empty; off, reciprocity says
// requests wait in arrival order.
func TestPrintLedger(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := client.Ledger{Reciprocity: true, HalfLifeS: 604800, Allowance: 512, Given: 300, Taken: 250, Accounts: []client.LedgerAccount{
		{Peer: "12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAcontrib", Taken: 250, Balance: 250, Standing: 0.33, Last: now.Add(-90 * time.Second)},
		{Peer: "12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAtaker", Given: 300, Balance: -300, Last: now.Add(-2 * time.Hour)},
	}}
	var out bytes.Buffer
	e := &env{stdout: &out}
	if err := printLedger(e, l, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gave 300, took 250", "half-life 168h0m0s", "reciprocity on", "+250", "+0.33", "1m30s ago", "-300", "+0.00", "2h0m0s ago"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ledger table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printLedger(e, client.Ledger{}, now); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "no receipts yet") || !strings.Contains(s, "arrival order") {
		t.Errorf("empty ledger, reciprocity off:\n%s", s)
	}
}
