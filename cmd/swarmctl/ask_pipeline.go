package main

import (
	"fmt"
	"strings"

	"github.com/llmswarm/llmswarm/answer"
)

// blame says how a failure is known.
func blame(proven bool, evidence string, suspects []string) string {
	if proven {
		return "proven: " + evidence
	}
	return fmt.Sprintf("not proven: %s; %d suspects avoided", evidence, len(suspects))
}

func routeString(hops []answer.Hop) string {
	var parts []string
	for _, h := range hops {
		parts = append(parts, fmt.Sprintf("%s [%d,%d)", shortID(h.Peer), h.Start, h.End))
	}
	return strings.Join(parts, " → ")
}

func tracePipelineEvent(e *env, ev *answer.Trace) {
	switch ev.Kind {
	case "route":
		fmt.Fprintf(e.stderr, "route      %s\n", routeString(ev.Route))
	case "standby":
		fmt.Fprintf(e.stderr, "standby    %s (kept warm)\n", routeString(ev.Route))
	case "spot_check":
		if len(ev.Route) == 0 {
			fmt.Fprintf(e.stderr, "spot-check %s\n", ev.Reason)
			return
		}
		fmt.Fprintf(e.stderr, "spot-check %s (every step compared)\n", routeString(ev.Route))
	case "mismatch", "accusation":
		fmt.Fprintf(e.stderr, "%-10s at token %d: %s (layers [%d,%d)), %s: %s\n", ev.Kind, ev.AtToken, shortID(ev.Failed),
			ev.Layers[0], ev.Layers[1], blame(ev.Proven, ev.Evidence, ev.Suspects), ev.Reason)
	case "draft":
		fmt.Fprintf(e.stderr, "draft      at token %d: %d of %d proposed accepted %v\n", ev.AtToken, ev.Accepted, len(ev.Drafted), ev.Drafted)
	case "reroute":
		fmt.Fprintf(e.stderr, "reroute    at token %d: %s (layers [%d,%d)) failed (%s): %s\n", ev.AtToken, shortID(ev.Failed),
			ev.Layers[0], ev.Layers[1], blame(ev.Proven, ev.Evidence, ev.Suspects), ev.Reason)
		if ev.Standby {
			fmt.Fprintf(e.stderr, "           detected after %s; the warm standby %s took over in %s\n", msDur(ev.DetectMS),
				routeString(ev.Route), msDur(ev.ReplayMS))
			return
		}
		fmt.Fprintf(e.stderr, "           detected after %s; new route %s; replayed %d tokens in %s\n", msDur(ev.DetectMS),
			routeString(ev.Route), ev.Replay, msDur(ev.ReplayMS))
	}
}

func pipelineFooter(e *env, res *answer.Result, trace bool) error {
	p, err := pipelineOf(res)
	if err != nil {
		return err
	}
	if trace {
		for i, h := range p.Hops {
			conn, on := "", ""
			if h.Conn != "" {
				conn = ", " + h.Conn
			}
			if h.Backend != "" {
				on = " on " + h.Backend
			}
			fmt.Fprintf(e.stderr, "hop %-6d %-12s layers [%d,%d)%s: compute %.2f ms/token, transfer %.3f ms/token%s\n",
				i, shortID(h.Peer), h.Start, h.End, on, h.ComputeMS, h.TransferMS, conn)
		}
	}
	s := fmt.Sprintf("— pipeline, %s: %d prompt + %d generated tokens (%s hidden states), first token %s, %.1f tok/s, total %s",
		p.Model, p.PromptTokens, len(p.Tokens), p.DType, msDur(p.TTFTMS), p.DecodeTPS, msDur(p.TotalMS))
	for _, r := range p.Reroutes {
		s += fmt.Sprintf("; re-routed at token %d around %s (layers [%d,%d)): detected after %s, replay %s", r.AtToken,
			shortID(r.Failed), r.Layers[0], r.Layers[1], msDur(r.DetectMS), msDur(r.ReplayMS))
	}
	if p.DraftRounds > 0 {
		s += fmt.Sprintf("; speculative: %d of %d drafted tokens accepted, %d verify steps", p.DraftAccepted, p.Drafted, p.DraftRounds)
		if n := len(p.Tokens); n > p.DraftAccepted {
			// Each accepted draft token saved the route a step.
			s += fmt.Sprintf(", %.2f tokens per route step", float64(n)/float64(n-p.DraftAccepted))
		}
	}
	if p.SpotChecked > 0 || p.Mismatches > 0 {
		s += fmt.Sprintf("; %d steps spot-checked on a second route, %d mismatches", p.SpotChecked, p.Mismatches)
	}
	if p.Done == "cancel" {
		s += "; partial: cut off by its deadline"
	}
	for _, d := range p.Disputed {
		peers := make([]string, len(d.Peers))
		for i, id := range d.Peers {
			peers[i] = shortID(id)
		}
		s += fmt.Sprintf("; (disputed: layers [%d,%d) ran on a peer another holder contradicted, %s, nothing showing which lied: this answer may be wrong)",
			d.Start, d.End, strings.Join(peers, " vs "))
	}
	fmt.Fprintln(e.stderr, s)
	if l := p.CheckLost; l != nil {
		fmt.Fprintf(e.stderr, "check lost: %d steps of this answer drawn for a spot check were not compared on a second route (%s)\n",
			l.Steps, l.Reason)
	}
	for _, u := range p.Unchecked {
		fmt.Fprintf(e.stderr, "unchecked: layers [%d,%d) on %s: no other live peer holds them, so nothing checked them (pipeline.require_checked refuses such routes)\n",
			u.Start, u.End, shortID(u.Peer))
	}
	return nil
}
