package moa

import (
	"regexp"
	"strings"
)

// ParseSpotter reads a spotter's answer strictly: after trimming blanks,
// quotes and a final period, and dropping a Qwen3 <think> block, it must be
// exactly one category name (any case). Anything else is not trusted.
func ParseSpotter(answer string) (QueryType, bool) {
	s := answer
	if i := strings.Index(s, "</think>"); i >= 0 {
		s = s[i+len("</think>"):]
	}
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, ".")
	s = strings.Trim(s, "\"'`*")
	s = strings.TrimSuffix(s, ".")
	s = strings.ToUpper(strings.TrimSpace(s))
	s = strings.ReplaceAll(s, " ", "_")
	for _, t := range QueryTypes {
		if s == string(t) {
			return t, true
		}
	}
	return "", false
}

var (
	reMath     = regexp.MustCompile(`(?i)(\d+\s*[-+*/^×÷=]\s*\d+|\b(solve|integral|derivative|equation|calculate|compute|sum of|product of|square root|factorial|probability|percent(age)?|how many|how much)\b|[∫√∑π])`)
	reCode     = regexp.MustCompile("(?i)(```|\\b(code|function|program|script|compile|bug|debug|python|golang|javascript|typescript|rust|java|c\\+\\+|sql|regex|api|implement|algorithm|stack trace|exception)\\b|\\w+\\(\\))")
	reCreative = regexp.MustCompile(`(?i)\b(write|compose|imagine|story|poem|haiku|lyrics|song|fiction|creative|invent|slogan|joke|describe a)\b`)
	reOpinion  = regexp.MustCompile(`(?i)\b(should i|should we|do you think|your opinion|what do you think|better|best|worse|worst|prefer|pros and cons|recommend|worth it|agree|disagree)\b`)
	reComplex  = regexp.MustCompile(`(?i)\b(why|how does|how do|how would|explain|compare|analy[sz]e|evaluate|implications?|trade-?offs?|design|strategy|plan|cause|consequences?|difference between)\b`)
	reFact     = regexp.MustCompile(`(?i)^\s*(what|who|when|where|which|is|are|was|were|does|did|how (tall|old|far|big|long))\b`)
)

// ClassifyRules is the rule-based classifier used when no spotter is live
// or its answer does not parse. Order matters: code and math are the most
// specific signals, then creative and opinion; short factual questions are
// SIMPLE_FACT, and everything else is treated as complex.
func ClassifyRules(query string) QueryType {
	q := strings.TrimSpace(query)
	switch {
	case reCode.MatchString(q):
		return Code
	case reMath.MatchString(q):
		return Math
	case reCreative.MatchString(q):
		return Creative
	case reOpinion.MatchString(q):
		return Opinion
	case reComplex.MatchString(q):
		return ComplexReasoning
	case reFact.MatchString(q) && len(strings.Fields(q)) <= 14:
		return SimpleFact
	case len(strings.Fields(q)) <= 6:
		return SimpleFact
	}
	return ComplexReasoning
}
