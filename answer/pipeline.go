package answer

// Pipeline is a pipeline generation's outcome: Result.Pipeline in
// pipeline mode.
type Pipeline struct {
	Model        string    `json:"model"`
	ModelCID     string    `json:"model_cid"`
	Text         string    `json:"text"`
	Reasoning    string    `json:"reasoning,omitempty"` // apart from Text (GPT-OSS's analysis channel)
	Tokens       []int32   `json:"tokens"`
	PromptTokens int       `json:"prompt_tokens"`
	DType        string    `json:"dtype"`
	Hops         []HopStat `json:"hops"`
	Reroutes     []Reroute `json:"reroutes,omitempty"`
	TTFTMS       float64   `json:"ttft_ms"`
	PrefillMS    float64   `json:"prefill_ms"`
	// PrefillParts is how many parts the prompt went down the route in,
	// pipelined across the stages (0: whole, a stage at a time).
	PrefillParts int     `json:"prefill_parts,omitempty"`
	DecodeTPS    float64 `json:"decode_tok_s"`
	TotalMS      float64 `json:"total_ms"`
	Done         string  `json:"done"` // stop, length, cancel
	// SpotChecked is how many steps a second route confirmed, SpotMaxDiff
	// the largest difference between the two among those, and Mismatches
	// how many it contradicted (see pipeline.SpotCheck).
	SpotChecked int     `json:"spot_checked,omitempty"`
	SpotMaxDiff float64 `json:"spot_max_diff,omitempty"`
	Mismatches  int     `json:"mismatches,omitempty"`
	// NearTies is how many steps a check route chose another token than
	// this one where both routes' logits make the two a tie within the
	// tolerance: honest rounding on other kernels, not a mismatch.
	NearTies int `json:"near_ties,omitempty"`
	// Drafted is how many tokens a speculating generation's draft proposed,
	// DraftAccepted how many of them the route accepted, Rounds its verify
	// steps.
	Drafted       int `json:"drafted,omitempty"`
	DraftAccepted int `json:"draft_accepted,omitempty"`
	DraftRounds   int `json:"draft_rounds,omitempty"`
	// VerifyAudits is how many accepted draft tokens of an answer no
	// second route checked were asked about again, its route's last hop
	// alone verifying the proposal and giving its logits for the same
	// input (1 at most; a hop that contradicts itself there is convicted).
	VerifyAudits int `json:"verify_audits,omitempty"`
	// Unchecked names the layers of the route that nobody could check:
	// each range with the peer that ran it, where no other live peer
	// holds those layers and the originator has no copy of them. A spot
	// check cannot catch a lie there (a plain step's or a verify step's):
	// the answer is that peer's word. Empty: every layer had a second
	// holder (whether this generation was drawn for a check is
	// SpotChecked).
	Unchecked []Hop `json:"unchecked,omitempty"`
	// Disputed names the layer ranges this answer ran on a peer that
	// another holder of them contradicted on real traffic, where nothing
	// has shown yet which of the two lied: the answer may be wrong.
	Disputed []Dispute `json:"disputed,omitempty"`
	// CheckLost is set when an answer drawn for a spot check (by chance,
	// through a peer on probation, or over layers on alert) went on with
	// steps no second route compared: its check route failed and no other
	// could be had, or there was none over other peers. A lie in those
	// steps goes uncaught, and they credit no peer's probation. Nil: every
	// step of a checked answer was compared, or the answer was not drawn
	// for a check (SpotChecked says how many steps were).
	CheckLost *CheckLost `json:"check_lost,omitempty"`
}

// CheckLost is how many steps of a checked answer went uncompared, and why
// (the last reason, when there were several).
type CheckLost struct {
	Steps  int    `json:"steps"`
	Reason string `json:"reason"`
}

// Dispute is two peers (Peers) that computed layers [Start,End)
// differently, neither proven to lie.
type Dispute struct {
	Start int      `json:"start"`
	End   int      `json:"end"`
	Peers []string `json:"peers"`
}

// Hop runs layers [Start,End) on Peer: one stage of a route.
type Hop struct {
	Peer  string `json:"peer"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

// HopStat is one hop's cost, averaged over the decode steps.
type HopStat struct {
	Peer       string  `json:"peer"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	ComputeMS  float64 `json:"compute_ms_per_token"`
	TransferMS float64 `json:"transfer_ms_per_token"` // to this hop and back, beyond the hops after it
	// Conn is how the previous hop (the originator, for the first) reaches
	// this one: "local", "direct", "punched" or "relayed"; known, and set,
	// only where that is this peer.
	Conn string `json:"conn,omitempty"`
	// Backend is where the hop's peer says it runs the hop's layers: "CPU",
	// or a GPU backend with its share of them ("Vulkan 4/4+head").
	Backend string `json:"backend,omitempty"`
}

// Reroute records a failover. DetectMS is how long the failed step ran
// before the failure was known (a reset stream: at once; a hung peer: the
// progress deadline and a ping); ReplayMS is the new route's open and
// replay; CostMS is both.
type Reroute struct {
	AtToken      int     `json:"at_token"`
	Failed       string  `json:"failed_peer"`
	Layers       [2]int  `json:"failed_layers"`
	Reason       string  `json:"reason"`
	NewRoute     []Hop   `json:"new_route"`
	ReplayTokens int     `json:"replay_tokens"`
	DetectMS     float64 `json:"detect_ms"`
	ReplayMS     float64 `json:"replay_ms"`
	CostMS       float64 `json:"cost_ms"`
	Standby      bool    `json:"standby,omitempty"` // the warm standby took over (no replay)
	// Proven: the originator saw the failure itself (Evidence says how:
	// its own stream, ping or check, the view, the first hop's own report,
	// a spot-check or the referee), and the failed peer is left out. Not
	// proven (Evidence accusation, stall or undecided): nobody is left out
	// or penalised; Suspects are avoided for the rest of the generation
	// where other peers cover their layers.
	Proven   bool     `json:"proven"`
	Evidence string   `json:"evidence"`
	Suspects []string `json:"suspects,omitempty"`
}

// Trace is a pipeline's progress worth showing, the body of the streamed
// "trace" event: "route", "standby" (a warm standby route opened),
// "reroute", "spot_check" (a second route opened to check this one),
// "mismatch" (the two disagreed; Failed is the liar found, if any),
// "accusation" (an error frame named a peer that answers pings), "draft"
// (a speculative round), "unchecked" (Route: the layers nobody else holds,
// see Pipeline.Unchecked).
type Trace struct {
	Kind     string  `json:"kind"`
	Route    []Hop   `json:"route,omitempty"`
	Failed   string  `json:"failed,omitempty"`
	Layers   [2]int  `json:"layers,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	AtToken  int     `json:"at_token"`
	DetectMS float64 `json:"detect_ms,omitempty"`
	ReplayMS float64 `json:"replay_ms,omitempty"`
	CostMS   float64 `json:"cost_ms,omitempty"`
	Replay   int     `json:"replay_tokens,omitempty"`
	Standby  bool    `json:"standby,omitempty"`
	// Proven and Evidence: how the originator knows of the failure (see
	// Reroute); Suspects: peers avoided without proof.
	Proven   bool     `json:"proven,omitempty"`
	Evidence string   `json:"evidence,omitempty"`
	Suspects []string `json:"suspects,omitempty"`
	// Drafted and Accepted, for a "draft" event (one speculative round at
	// AtToken): the tokens the draft proposed and how many of them the
	// route accepted.
	Drafted  []int32 `json:"drafted,omitempty"`
	Accepted int     `json:"accepted,omitempty"`
}
