package moa

import (
	"time"

	"github.com/llmswarm/llmswarm/answer"
)

// The roles of the mixture.
const (
	Reasoner    = "reasoner"
	Writer      = "writer"
	Concise     = "concise"
	Critic      = "critic"
	Factchecker = "factchecker"
	Drafter     = "drafter"
	Spotter     = "spotter"
	Aggregator  = "aggregator"
)

// Roles lists every role, in the order they are shown: answer's list,
// which swarmctl checks modes against without linking this package
// (TestRolesAreAnswers keeps the constants above in it).
var Roles = answer.Roles

// IsRole reports whether r is a role of the mixture.
func IsRole(r string) bool {
	_, ok := systemPrompts[r]
	return ok
}

// systemPrompts give each role its voice. The spotter's and aggregator's
// are templates filled per query.
var systemPrompts = map[string]string{
	Reasoner: "You are the Reasoner in a team of AI agents. Think step by step and show your " +
		"reasoning chain: state what is given, work through each step, then give the answer " +
		"on its own line starting with \"Answer:\".",
	Writer: "You are the Writer in a team of AI agents. Answer in clear, well-structured, " +
		"engaging prose: lead with the point, use short paragraphs, and end when the question " +
		"is fully answered.",
	Concise: "You are the Concise agent in a team of AI agents. Answer in as few words as " +
		"possible while still being complete and correct. No preamble, no repetition.",
	Critic: "You are the Critic in a team of AI agents. Answer the question, then point out " +
		"flaws, hidden assumptions, edge cases and counterarguments that a quick answer would miss.",
	Factchecker: "You are the Factchecker in a team of AI agents. Answer using only verifiable " +
		"facts. Mark anything you are not sure of with \"(uncertain)\" and never invent " +
		"names, numbers, dates or sources.",
	Drafter: "You are the Drafter in a team of AI agents. Give a fast first-pass answer: " +
		"favour speed over polish, keep it short, and do not hedge.",
	Spotter: "You classify user queries. Reply with exactly one word, the category of the " +
		"query, chosen from: SIMPLE_FACT, COMPLEX_REASONING, CREATIVE, CODE, MATH, OPINION. " +
		"Reply with the category only.",
	Aggregator: "You are the Aggregator of a team of AI agents. You receive a question and the " +
		"answers of several agents, each labelled with its role and model. Write the single " +
		"best answer to the question: keep what is correct, drop what is wrong or unsupported, " +
		"and resolve disagreements. Prefer the Factchecker and the Critic over the Drafter on " +
		"facts and flaws, the Writer for clarity, and the Reasoner for logic. Answer the " +
		"question directly; do not mention the agents.",
}

// SystemPrompt returns the system prompt of a role.
func SystemPrompt(role string) string { return systemPrompts[role] }

// QueryType is the class of a query, which decides the roles asked.
type QueryType string

const (
	SimpleFact       QueryType = "SIMPLE_FACT"
	ComplexReasoning QueryType = "COMPLEX_REASONING"
	Creative         QueryType = "CREATIVE"
	Code             QueryType = "CODE"
	Math             QueryType = "MATH"
	Opinion          QueryType = "OPINION"
)

// QueryTypes lists every type.
var QueryTypes = []QueryType{SimpleFact, ComplexReasoning, Creative, Code, Math, Opinion}

// targets are the roles asked for each type, most important first.
var targets = map[QueryType][]string{
	SimpleFact:       {Reasoner, Concise},
	ComplexReasoning: {Reasoner, Writer, Critic, Factchecker, Drafter},
	Creative:         {Writer, Reasoner, Critic},
	Code:             {Reasoner, Factchecker, Critic},
	Math:             {Reasoner, Factchecker, Concise},
	Opinion:          {Writer, Critic, Reasoner},
}

// Targets returns the roles to ask for a query type.
func Targets(t QueryType) []string { return append([]string(nil), targets[t]...) }

// Timeouts are optional fixed caps on how long the originator waits for
// an answer, by query kind. Zero (the default) is no fixed cap: each agent
// gets the time its device needs for the tokens asked (see budget), the
// user's own deadline bounds the whole, and hung peers are caught by the
// progress watch.
type Timeouts struct {
	Simple  time.Duration // SIMPLE_FACT
	Complex time.Duration // every other type
	Speed   time.Duration // speed mode
}

// For returns the cap for a query of type qt in mode (0: none).
func (t Timeouts) For(mode Mode, qt QueryType) time.Duration {
	switch {
	case mode == ModeSpeed:
		return t.Speed
	case qt == SimpleFact:
		return t.Simple
	}
	return t.Complex
}

// Mode is how the originator answers.
type Mode string

const (
	ModeMoA   Mode = "moa"   // classify, fan out, aggregate
	ModeSpeed Mode = "speed" // a drafter answers, a reasoner verifies
)
