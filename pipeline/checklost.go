package pipeline

import "github.com/llmswarm/llmswarm/answer"

// lostChecks counts the steps of a generation drawn for a spot check that
// no second route compared: its check route failed and no other could be
// had, it had none over other peers, or the routes ran otherwise for a
// step. The answer says so (answer.Pipeline.CheckLost): a checked answer
// that silently went unchecked would read as one that passed.
type lostChecks struct {
	drawn    bool   // the generation was drawn for a check
	compared bool   // this step's result was compared on a second route
	steps    int    // steps of a drawn generation nobody compared
	why      string // the last reason a check route was lost
}

// step closes one step: counted when the generation was drawn for a
// check and nothing compared it.
func (l *lostChecks) step() {
	if l.drawn && !l.compared {
		l.steps++
	}
}

// result is what the answer says of the lost steps: nil when none were,
// or when the answer names layers nobody could check (unchecked): no
// second route could exist then, and those layers say more.
func (l *lostChecks) result(unchecked []answer.Hop) *answer.CheckLost {
	if l.steps == 0 || len(unchecked) > 0 {
		return nil
	}
	why := l.why
	if why == "" {
		why = "the routes ran otherwise for a step (one reopened without verify steps): it was not compared"
	}
	return &answer.CheckLost{Steps: l.steps, Reason: why}
}
