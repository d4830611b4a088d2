package client

import (
	"context"
	"time"
)

// Ledger is GET /v1/swarm/ledger: this peer's accounts of give and take,
// from the receipts it signed and was sent (docs/trust.md, "Give and
// take"). Work is in tokens of a whole model, decayed to now.
type Ledger struct {
	Reciprocity bool    `json:"reciprocity"` // contended requests ranked by standing (ledger.reciprocity)
	HalfLifeS   float64 `json:"half_life_s"`
	Allowance   float64 `json:"allowance"`
	Given       float64 `json:"given"` // summed over the accounts
	Taken       float64 `json:"taken"`
	// Accounts are per peer, the largest balances (either sign) first.
	Accounts []LedgerAccount `json:"accounts"`
}

// LedgerAccount is what this peer and one other did for each other.
type LedgerAccount struct {
	Peer     string    `json:"peer"`
	Given    float64   `json:"given"`    // work this peer did for it
	Taken    float64   `json:"taken"`    // work it did for this peer
	Vouched  float64   `json:"vouched"`  // credit others' receipts for its work earned it here
	Balance  float64   `json:"balance"`  // taken + vouched - given: what this peer owes it
	Standing float64   `json:"standing"` // its rank for a contended slot here, -1..1
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
}

// LedgerSummary is the ledger in GET /v1/swarm/status.
type LedgerSummary struct {
	Reciprocity bool    `json:"reciprocity"`
	Peers       int     `json:"peers"`
	Given       float64 `json:"given"`
	Taken       float64 `json:"taken"`
}

// Ledger returns this peer's ledger of give and take.
func (c *Client) Ledger(ctx context.Context) (Ledger, error) {
	var out Ledger
	return out, c.get(ctx, "/v1/swarm/ledger", &out)
}
