package pipeline

import (
	"errors"
	"fmt"
)

var (
	// ErrBadFrame: a frame is malformed or does not fit the session.
	ErrBadFrame = errors.New("pipeline: bad frame")
	// ErrNoModel: no live peer holds layers of the model asked.
	ErrNoModel = errors.New("pipeline: no live peer holds this model")
	// ErrAmbiguousModel: the request names no model, or a name, that
	// several models held match; the caller must say which.
	ErrAmbiguousModel = errors.New("pipeline: several models are held")
	// ErrTooManyReroutes: the route kept failing.
	ErrTooManyReroutes = errors.New("pipeline: too many re-routes")
	// ErrCheckFailed: a peer failed a check this peer made itself (an
	// Originator.Referee wraps it to say the suspect is a proven liar).
	ErrCheckFailed = errors.New("pipeline: check failed")
)

// How a failure is known: the originator's own evidence. A StageError
// with no Evidence is another peer's word (an error frame naming a hop).
const (
	EvidenceStream  = "stream"     // this peer's own stream to the first hop failed or timed out
	EvidencePing    = "ping"       // the peer did not answer this peer's ping
	EvidenceDead    = "dead"       // the swarm view or the BMC table declares it dead
	EvidenceSelf    = "self"       // the first hop reported its own failure on this peer's stream
	EvidenceCheck   = "check"      // this peer received bad numbers from it
	EvidenceLocal   = "spot_check" // a spot-check this peer refereed with its own copy of the layers
	EvidenceReferee = "referee"    // Originator.Referee found it lying
	// EvidenceMajority: a third holder of its layers (or this peer's own
	// copy), run on the same input, agreed with the hop it disagreed with.
	EvidenceMajority = "majority"
	// Not proof: the peers named are avoided for the generation, and
	// nobody is excluded for longer or penalised.
	EvidenceAccusation = "accusation" // an error frame named a peer that answers pings
	EvidenceStall      = "stall"      // no progress although every hop answers pings
	EvidenceUndecided  = "undecided"  // two routes disagreed and nothing showed which lied
)

// StageError is a failure of one stage of a route.
type StageError struct {
	Peer   string
	Layers [2]int
	Code   string
	Err    error
	// Evidence says how this peer knows it (an Evidence* constant); empty:
	// another peer reported it.
	Evidence string
}

func (e *StageError) Error() string {
	return fmt.Sprintf("pipeline: stage %s (layers [%d,%d)): %v", short(e.Peer), e.Layers[0], e.Layers[1], e.Err)
}

func (e *StageError) Unwrap() error { return e.Err }

func short(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-10:]
	}
	return id
}
