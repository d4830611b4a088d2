package moa

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/llmswarm/llmswarm/answer"
)

// Fitting the aggregator's prompt to its context. The question is kept
// whole; the agents' answers share what is left, trimmed fairly (short
// answers whole, long ones cut to the same length). The first fit comes
// from the aggregator's announced context and a cautious characters-per-
// token guess; when the aggregator still answers too_long, it says how many
// tokens the prompt took, and the answers are cut by that much and asked
// again of the same peer (never the same oversized prompt of the next one).
const (
	charsPerToken   = 3.0  // cautious: English runs near 4
	promptOverhead  = 200  // tokens of system prompt, chat template and labels
	defaultContext  = 4096 // when the aggregator does not announce its context
	maxAnswerChars  = 12000
	minAnswerBudget = 200 // characters; less is not worth asking for
	fitAttempts     = 3
)

// aggregate asks the aggregator to merge the answers into one.
func (o *Originator) aggregate(ctx context.Context, q Query, answers []answer.Agent, onToken func(peer, text, reasoning string)) answer.Agent {
	budget := o.answerBudget(q)
	var agg answer.Agent
	for range fitAttempts {
		prompt := aggregationPrompt(q.Prompt, answers, budget)
		streamed := false
		agg = o.askRole(ctx, Aggregator, o.request(Aggregator, q, prompt), func(p, t, r string) {
			streamed = true
			onToken(p, t, r)
		}, true)
		var tl *TooLongError
		if streamed || !errors.As(agg.Err, &tl) || tl.Prompt <= 0 || tl.Context <= 0 {
			return agg
		}
		// Cut the answers by the overflow, measured in this prompt's own
		// characters per token, with a tenth to spare.
		target := tl.Context - reserve(q.MaxTokens, tl.Context)
		perToken := float64(len(prompt)) / float64(tl.Prompt)
		used := quotedChars(answers, budget)
		budget = used - int(float64(tl.Prompt-target)*perToken*1.1)
		o.log().Info("aggregator prompt too long; trimming the answers", "prompt_tokens", tl.Prompt, "context", tl.Context, "answer_chars", budget)
		if budget < minAnswerBudget {
			agg.Error = fmt.Sprintf("%s: the answers do not fit the aggregator's context of %d tokens", agg.Error, tl.Context)
			return agg
		}
	}
	return agg
}

// reserve is the context kept for the aggregator's own answer.
func reserve(maxTokens, context int) int {
	if maxTokens > 0 {
		return min(maxTokens, context/2)
	}
	return context / 4
}

// answerBudget is the characters of answers the live aggregators' smallest
// context holds beside the question and the answer.
func (o *Originator) answerBudget(q Query) int {
	ctxTokens := 0
	for _, c := range o.candidates(Aggregator) {
		if n := c.role.Context; n > 0 && (ctxTokens == 0 || n < ctxTokens) {
			ctxTokens = n
		}
	}
	if ctxTokens == 0 {
		ctxTokens = defaultContext
	}
	question := len(q.Prompt)
	for _, m := range q.History {
		question += len(m.Content)
	}
	tokens := ctxTokens - reserve(q.MaxTokens, ctxTokens) - promptOverhead
	return max(min(int(float64(tokens)*charsPerToken)-question, maxAnswerChars*len(Roles)), minAnswerBudget)
}

// fairCap is the largest per-answer length such that the answers, each cut
// to it, add up to at most budget (water-filling): short answers stay
// whole and the long ones share the rest equally.
func fairCap(lengths []int, budget int) int {
	total := 0
	for _, l := range lengths {
		total += l
	}
	if total <= budget {
		return -1 // no cut
	}
	lo, hi := 0, budget
	for lo < hi {
		mid := (lo + hi + 1) / 2
		sum := 0
		for _, l := range lengths {
			sum += min(l, mid)
		}
		if sum <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// quoted returns the answers as they go into the prompt.
func quoted(answers []answer.Agent, budget int) []string {
	texts := make([]string, len(answers))
	lengths := make([]int, len(answers))
	for i, a := range answers {
		texts[i] = strings.TrimSpace(a.Content)
		lengths[i] = len(texts[i])
	}
	if c := fairCap(lengths, max(budget, 0)); c >= 0 {
		for i, t := range texts {
			if len(t) > c {
				cut := c
				for cut > 0 && !utf8.RuneStart(t[cut]) {
					cut--
				}
				texts[i] = t[:cut] + " [...]"
			}
		}
	}
	return texts
}

func quotedChars(answers []answer.Agent, budget int) int {
	n := 0
	for _, t := range quoted(answers, budget) {
		n += len(t)
	}
	return n
}

func aggregationPrompt(question string, answers []answer.Agent, budget int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Question: %s\n\nAnswers from the agents:\n", question)
	for i, text := range quoted(answers, budget) {
		a := answers[i]
		model := a.Model
		if model == "" {
			model = "unknown model"
		}
		label := ""
		if a.Partial {
			label = ", cut off before it finished"
		}
		fmt.Fprintf(&b, "\n[%d] %s (model %s%s):\n%s\n", i+1, titleCase(a.Role), model, label, text)
	}
	b.WriteString("\nWrite the single best answer to the question.")
	return b.String()
}
