package bmc_test

import (
	"slices"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/bmc/bmcsim"
)

// TestMeasure fills the board's tables and reports the figures the issue
// asks for: flash and RAM use, PING round trip through the bridge, and the
// time to dump and sign a full table. It asserts correctness, never speed.
func TestMeasure(t *testing.T) {
	t.Parallel()
	b, _ := provisioned(t)
	ctx := ctxT(t, 60*time.Second)

	elf, _, err := bmcsim.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	size, err := bmcsim.MeasureSize(ctx, elf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("firmware: flash %d of 32768 bytes, static RAM %d of 2048 bytes", size.Flash, size.RAM)

	var rtts []time.Duration
	for i := 0; i < 100; i++ {
		rtt, err := b.Ping(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rtts = append(rtts, rtt)
	}
	slices.Sort(rtts)
	t.Logf("PING x100 through the bridge: min %v median %v p90 %v max %v", rtts[0], rtts[50], rtts[90], rtts[99])

	model := bmc.HandleFor([]byte("model"))
	for i := 0; i < bmc.MaxNodes; i++ {
		n := bmc.HandleFor([]byte{byte(i)})
		if _, err := b.Heartbeat(ctx, n, 255); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < bmc.MaxParts; i++ {
		p := bmc.Partition{Node: bmc.HandleFor([]byte{byte(i)}), Model: model, First: uint16(1000 * i), End: uint16(1000*i + 999)}
		if _, err := b.SetPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	tab, err := b.Table(ctx)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if len(tab.Nodes) != bmc.MaxNodes || len(tab.Parts) != bmc.MaxParts {
		t.Fatalf("full table has %d nodes %d parts", len(tab.Nodes), len(tab.Parts))
	}
	st, err := b.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("full table (%d nodes, %d parts, %d bytes): TAB round trip %v, HMAC on the board %v, free RAM (stack high-water) %d bytes",
		len(tab.Nodes), len(tab.Parts), len(tab.Raw), elapsed.Round(time.Millisecond), st.MACTime, st.FreeRAM)
}
