package answer

import (
	"errors"
	"fmt"
)

// Kind is what kind of failure ended a request, in the words clients see:
// the error "type" of the HTTP API (api maps each kind to its status) and
// the kind mobile's OnError reports.
type Kind string

// The kinds of failure.
const (
	BadRequest     Kind = "invalid_request_error"   // the request is wrong: fix it, do not retry it
	ContextFull    Kind = "context_length_exceeded" // the prompt does not fit the model's context
	NotFound       Kind = "not_found"               // no such role, shard or BMC here
	ModelNotFound  Kind = "model_not_found"         // no such model (name, CID or hub reference)
	Unavailable    Kind = "unavailable"             // this peer is not running (starting or shutting down)
	NoAgents       Kind = "no_agents"               // no live peer serves the roles a query needs
	NoRoute        Kind = "no_route"                // live peers do not cover a model's layers
	NoResponse     Kind = "no_response"             // every agent asked failed
	Busy           Kind = "busy"                    // every agent asked was at its limit: retry later
	Timeout        Kind = "timeout"                 // no answer within the request's deadline
	Cancelled      Kind = "cancelled"               // the caller went away or cancelled
	PipelineFailed Kind = "pipeline_failed"         // a pipeline generation failed past its failovers
	NoPlan         Kind = "no_plan"                 // no placement of a model fits the live peers
	Unchecked      Kind = "unchecked_route"         // every route has layers nobody can check, and the peer requires checked ones
	NoMemory       Kind = "no_memory"               // loading would pass the peer's memory budget
	NoStorage      Kind = "insufficient_storage"    // the data dir's disk cannot hold a download
	HubAuth        Kind = "hub_auth"                // a model hub refused the credentials
	HubCorrupt     Kind = "hub_corrupt"             // a download does not match its checksum
	HubFailed      Kind = "hub_failed"              // a model hub could not be reached or failed
	NotAModel      Kind = "not_a_model"             // a download is not a model this peer can run
	Internal       Kind = "internal_error"          // none of the above: a bug or an unforeseen failure
)

// Error is a failure of a known kind. Its text is Err's: the message
// clients see.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf is a failure of kind k, its error made as fmt.Errorf makes one.
func Errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, args...)}
}

// Wrap is err as a failure of kind k.
func Wrap(k Kind, err error) error {
	return &Error{Kind: k, Err: err}
}

// KindOf is the kind of err: that of the outermost *Error in its chain,
// Internal when there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}
