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
	// ErrTooManyReroutes: the route kept failing.
	ErrTooManyReroutes = errors.New("pipeline: too many re-routes")
)

// StageError is a failure of one stage of a route.
type StageError struct {
	Peer   string
	Layers [2]int
	Code   string
	Err    error
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
