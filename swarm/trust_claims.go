package swarm

// WholeModel is the End of a claim to every layer of a model whose layer
// count the claimant does not announce: a Mixture-of-Agents role model
// (a role record names the model, not its shape). A checker resolves it
// from its own copy of the model and, once the peer computed every layer
// [0,n) correctly, records the claim as it was made, so it covers any
// range of that model.
const WholeModel = 1 << 20

// RoleClaim is the claim of a peer serving model (by CID) as a role: the
// whole model.
func RoleClaim(model string) Claim { return Claim{Model: model, Start: 0, End: WholeModel} }

// Whole reports whether c claims the whole model (see WholeModel).
func (c Claim) Whole() bool { return c.End == WholeModel }

// MsPerLayerKey is the Trust.Measure key of the time a peer took per layer
// of model (a CID), as this peer measured it.
func MsPerLayerKey(model string) string { return "ms_per_layer:" + model }

// TokPerSecKey is the Trust.Measure key of the decode speed a peer showed
// answering as role, as this peer measured it.
func TokPerSecKey(role string) string { return "tok_s:" + role }
