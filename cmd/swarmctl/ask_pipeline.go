package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/llmswarm/llmswarm/node/client"
)

type pipeHop struct {
	Peer       string  `json:"peer"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	ComputeMS  float64 `json:"compute_ms_per_token"`
	TransferMS float64 `json:"transfer_ms_per_token"`
	Conn       string  `json:"conn"`
}

type pipeTrace struct {
	Kind     string    `json:"kind"`
	Route    []pipeHop `json:"route"`
	Failed   string    `json:"failed"`
	Layers   [2]int    `json:"layers"`
	Reason   string    `json:"reason"`
	AtToken  int       `json:"at_token"`
	DetectMS float64   `json:"detect_ms"`
	ReplayMS float64   `json:"replay_ms"`
	CostMS   float64   `json:"cost_ms"`
	Replay   int       `json:"replay_tokens"`
	Standby  bool      `json:"standby"`
	Proven   bool      `json:"proven"`
	Evidence string    `json:"evidence"`
	Suspects []string  `json:"suspects"`
	Drafted  []int32   `json:"drafted"`
	Accepted int       `json:"accepted"`
}

// blame says how a failure is known.
func blame(proven bool, evidence string, suspects []string) string {
	if proven {
		return "proven: " + evidence
	}
	return fmt.Sprintf("not proven: %s; %d suspects avoided", evidence, len(suspects))
}

type pipeResult struct {
	Model        string    `json:"model"`
	ModelCID     string    `json:"model_cid"`
	Tokens       []int32   `json:"tokens"`
	PromptTokens int       `json:"prompt_tokens"`
	DType        string    `json:"dtype"`
	Hops         []pipeHop `json:"hops"`
	Reroutes     []struct {
		AtToken      int     `json:"at_token"`
		Failed       string  `json:"failed_peer"`
		Layers       [2]int  `json:"failed_layers"`
		ReplayTokens int     `json:"replay_tokens"`
		DetectMS     float64 `json:"detect_ms"`
		ReplayMS     float64 `json:"replay_ms"`
		CostMS       float64 `json:"cost_ms"`
	} `json:"reroutes"`
	TTFTMS        float64 `json:"ttft_ms"`
	DecodeTPS     float64 `json:"decode_tok_s"`
	TotalMS       float64 `json:"total_ms"`
	SpotChecked   int     `json:"spot_checked"`
	Mismatches    int     `json:"mismatches"`
	Drafted       int     `json:"drafted"`
	DraftAccepted int     `json:"draft_accepted"`
	DraftRounds   int     `json:"draft_rounds"`
}

func routeString(hops []pipeHop) string {
	var parts []string
	for _, h := range hops {
		parts = append(parts, fmt.Sprintf("%s [%d,%d)", shortID(h.Peer), h.Start, h.End))
	}
	return strings.Join(parts, " → ")
}

func tracePipelineEvent(e *env, raw json.RawMessage) {
	var ev pipeTrace
	if json.Unmarshal(raw, &ev) != nil {
		return
	}
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

func pipelineFooter(e *env, res *client.QueryResult, trace bool) error {
	var p pipeResult
	if err := decodeRaw(res.Pipeline, &p); err != nil {
		return err
	}
	if trace {
		for i, h := range p.Hops {
			conn := ""
			if h.Conn != "" {
				conn = ", " + h.Conn
			}
			fmt.Fprintf(e.stderr, "hop %-6d %-12s layers [%d,%d): compute %.2f ms/token, transfer %.3f ms/token%s\n",
				i, shortID(h.Peer), h.Start, h.End, h.ComputeMS, h.TransferMS, conn)
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
	fmt.Fprintln(e.stderr, s)
	return nil
}
