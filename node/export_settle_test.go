package node

import (
	"context"
	"errors"
)

// SettleLayersForTest loads layers [lo,hi) of model as the originator does
// to settle a dispute from verified weights (pipeline's Verified hook). It
// returns the loaded slice's path and a function that unloads it.
func (n *Node) SettleLayersForTest(ctx context.Context, model string, lo, hi int) (string, func(), error) {
	if n.pipeOrig.Verified == nil {
		return "", nil, errors.New("node: no Verified hook on the pipeline originator")
	}
	sh, release, err := n.pipeOrig.Verified(ctx, model, lo, hi)
	if err != nil {
		return "", nil, err
	}
	return sh.Path, release, nil
}
