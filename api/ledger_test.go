package api_test

import (
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestLedgerOverTheAPI: one real peer answers another's question as its
// reasoner; the asker's ledger shows the work taken, the answering peer's
// (from the receipt it was sent) the work given, in GET
// /v1/swarm/ledger and the status; and the answering peer's account
// survives its restart.
func TestLedgerOverTheAPI(t *testing.T) {
	model := nodetest.TinyModel(t, "f32")
	peers := nodetest.Cluster(t, 2, func(i int, c *node.Config) {
		c.Engine.Threads = 1
		c.Ledger.ReceiptDelay = node.Duration(100 * time.Millisecond)
		if i == 0 {
			c.Roles = map[string]string{"reasoner": model}
		}
	})
	server, asker := peers[0], peers[1]
	ac := client.New(asker.APIAddr(), "")
	nodetest.Eventually(t, 30*time.Second, "the asker gets an answer from the reasoner", func() bool {
		_, err := ac.Query(t.Context(), client.QueryRequest{Query: "Why is the sky blue?", Mode: "reasoner", MaxTokens: 8}, nil)
		return err == nil
	})
	// The asker counted what it took at once; the server counts it as
	// given once the receipt (after ledger.receipt_delay) arrives. Both
	// include the reference layer the asker fetched from the server to
	// check its claim before asking it.
	taken, err := ac.Ledger(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(taken.Accounts) != 1 || taken.Accounts[0].Peer != server.ID().String() || taken.Accounts[0].Taken <= 0 {
		t.Fatalf("asker's ledger %+v: want work taken from %s", taken, server.ID())
	}
	want := taken.Accounts[0].Taken
	sc := client.New(server.APIAddr(), "")
	var given client.Ledger
	nodetest.Eventually(t, 10*time.Second, "the server counts the asker's receipts", func() bool {
		l, err := sc.Ledger(t.Context())
		given = l
		return err == nil && len(l.Accounts) == 1 && l.Accounts[0].Given >= want*0.999
	})
	a := given.Accounts[0]
	if a.Peer != asker.ID().String() || a.Taken != 0 || a.Balance >= 0 || a.Given > want*1.001 || !given.Reciprocity {
		t.Fatalf("server's ledger %+v: want %.2f given to %s", given, want, asker.ID())
	}
	st, err := sc.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Ledger.Peers != 1 || st.Ledger.Given <= 0 {
		t.Fatalf("status ledger %+v", st.Ledger)
	}
	cfg := server.Node.Config
	cfg.DataDir = server.Dir
	server.Node.Close()
	again := nodetest.Start(t, cfg)
	back, err := client.New(again.APIAddr(), "").Ledger(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Accounts) != 1 || back.Accounts[0].Peer != asker.ID().String() || back.Accounts[0].Given < a.Given*0.99 {
		t.Fatalf("after a restart: %+v, want the asker's account back", back)
	}
}
