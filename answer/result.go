package answer

// Result is a query's answer and how it was reached: the body of POST
// /v1/swarm/query and of its streamed "result" event.
type Result struct {
	Query string `json:"query"`
	// QueryType and Classifier, for MoA and role modes: the class of the
	// query (moa.QueryType) and who decided it ("spotter" or "rules").
	QueryType  string `json:"query_type,omitempty"`
	Classifier string `json:"classifier,omitempty"`
	// Mode is the strategy that answered: moa, speed, pipeline, a role's
	// name, or, for an answer a stop string ended before any strategy
	// had one, the mode asked for.
	Mode            string  `json:"mode"`
	AgentResponses  []Agent `json:"agent_responses"`
	FailedAgents    []Agent `json:"failed_agents,omitempty"`
	Aggregator      *Agent  `json:"aggregator,omitempty"`
	FinalAnswer     string  `json:"final_answer"`
	Reasoning       string  `json:"reasoning,omitempty"` // FinalAnswer's writer's reasoning, apart from it (GPT-OSS's analysis channel)
	TotalTimeMS     float64 `json:"total_time_ms"`
	AgentsResponded int     `json:"agents_responded"`
	// Pipeline is set in pipeline mode.
	Pipeline *Pipeline `json:"pipeline,omitempty"`
	// Stopped: a stop string ended the answer before any strategy had
	// one to report; FinalAnswer is the text before it.
	Stopped bool `json:"stopped,omitempty"`
}

// Agent is one agent's answer, or its failure: an element of a Result and
// the body of the streamed "agent" event.
type Agent struct {
	Role      string  `json:"role"`
	Peer      string  `json:"peer"`
	Model     string  `json:"model"`
	ModelCID  string  `json:"model_cid,omitempty"`
	Content   string  `json:"content"`
	Reasoning string  `json:"reasoning,omitempty"` // apart from Content, never an aggregator's input; none over moa 1.0.0
	Tokens    int     `json:"tokens"`
	TokPerSec float64 `json:"tok_s"`
	MS        float64 `json:"ms"`        // wall time seen by the originator
	ServerMS  float64 `json:"server_ms"` // the agent's own time, as it reports
	TTFTMS    float64 `json:"ttft_ms"`
	Prompt    int     `json:"prompt_tokens"`
	Weight    float64 `json:"weight"`
	Thermal   string  `json:"thermal,omitempty"`
	Battery   int     `json:"battery,omitempty"`
	// Conn is how the originator reached the agent: "local", "direct",
	// "punched" or "relayed".
	Conn string `json:"conn,omitempty"`
	// Unverified: the answer came from a peer whose claim to its role
	// model the originator has not verified (it had no copy to check it
	// with).
	Unverified bool `json:"unverified,omitempty"`
	// Partial: the answer was cut off (by its deadline, or by a peer that
	// hung mid-answer) and is used as far as it goes.
	Partial       bool   `json:"partial,omitempty"`
	PartialReason string `json:"partial_reason,omitempty"`
	// Done is why a whole answer ended, as the pipeline's done says it:
	// "stop" (an end-of-generation token or a stop string) or "length"
	// (max_tokens, or the model's context filled up).
	Done string `json:"done,omitempty"`
	// Skipped are the holders of the role tried before this answer, each
	// with why it was left ("…peer: hung: ...").
	Skipped []string `json:"skipped,omitempty"`
	// Draft: the answer was drafted by another model (speed mode).
	Draft *Draft `json:"draft,omitempty"`
	Error string `json:"error,omitempty"`
	// Err is Error as a Go error, on the peer that saw the failure; it is
	// never encoded, so a client has Error alone.
	Err error `json:"-"`
}

// Draft is how a speculative speed-mode answer was drafted: by which
// peer's drafter, how many tokens it proposed, how many of them the
// answering model accepted, in how many verify steps, and why drafting
// did not start or stopped early ("": it did not).
type Draft struct {
	Peer     string `json:"peer"`
	Drafted  int    `json:"drafted"`
	Accepted int    `json:"accepted"`
	Rounds   int    `json:"rounds"`
	Error    string `json:"error,omitempty"`
}
