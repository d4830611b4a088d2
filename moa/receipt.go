package moa

// What an originator signs for an answer (ledger.Receipt): the tokens a
// role peer says it read and wrote, bounded by what the originator can
// check, so that a peer cannot get a receipt for more than it did.

// promptSlack is how many tokens a chat template and the role's system
// prompt may add to a request's own text.
const promptSlack = 512

// receiptTokens is an answer's tokens in and out, as its receipt counts
// them: the prompt at most one token per byte of the request's text and
// the template's slack; the answer at most the request's max_tokens and
// the pieces of text received, each a token or more.
func receiptTokens(req *Request, d *Done, pieces int) int64 {
	in := promptSlack + len(req.Prompt)
	for _, m := range req.Messages {
		in += len(m.Content) + 8
	}
	out := pieces
	if req.MaxTokens > 0 {
		out = min(out, req.MaxTokens)
	}
	return int64(min(max(d.PromptTokens, 0), in) + min(max(d.Tokens, 0), out))
}
