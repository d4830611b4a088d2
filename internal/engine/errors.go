package engine

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrCapacity means every session slot of a model is in use.
	ErrCapacity = errors.New("engine: all session slots are busy")
	// ErrUnsupportedArch means the GGUF's general.architecture is not one the
	// engine runs (Architectures).
	ErrUnsupportedArch = errors.New("engine: unsupported architecture")
	// ErrNotGGUF means the file does not start with the GGUF magic or its
	// header cannot be parsed.
	ErrNotGGUF = errors.New("engine: not a GGUF file")
	// ErrTruncated means the file is shorter than its header says.
	ErrTruncated = errors.New("engine: truncated model file")
	// ErrMissingLayers means a layer range was asked of a file (typically a
	// stage slice) that lacks some of its tensors.
	ErrMissingLayers = errors.New("engine: model file lacks the requested layers")
	// ErrBadRange means a layer range is empty or outside the model.
	ErrBadRange = errors.New("engine: bad layer range")
	// ErrBadInput means tokens or hidden states do not fit the call.
	ErrBadInput = errors.New("engine: bad input")
	// ErrContextFull means a session would exceed its KV capacity.
	ErrContextFull = errors.New("engine: session context is full")
	// ErrSessionClosed means the session was closed or expired (idle TTL).
	ErrSessionClosed = errors.New("engine: session closed or expired")
	// ErrClosed means the model was closed.
	ErrClosed = errors.New("engine: model closed")
	// ErrInternal wraps a panic recovered from ollama or ggml.
	ErrInternal = errors.New("engine: internal error")
	// ErrNoChatTemplate means the model has no chat template the engine can
	// use (none in the file, or one that does not render and is none of the
	// hand-written formats): it answers raw completions only.
	ErrNoChatTemplate = errors.New("engine: the model has no usable chat template, only raw completion")
	// ErrChatTemplate means the model's chat template failed to render a
	// conversation or refused it (ChatTemplateError says which).
	ErrChatTemplate = errors.New("engine: chat template")
)

// FileError names the model file a load failed on.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("engine: %s: %s", e.Path, strings.TrimPrefix(e.Err.Error(), "engine: "))
}
func (e *FileError) Unwrap() error { return e.Err }

// recoverErr turns a panic into an ErrInternal error stored in *err. Use it
// deferred at every boundary that calls into ollama.
func recoverErr(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: %v", ErrInternal, what, r)
	}
}

// ContextError is a prompt that does not fit a session's context. It
// matches ErrContextFull.
type ContextError struct {
	Prompt  int // tokens
	Context int // the session's capacity
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("%v: prompt of %d tokens, session context %d", ErrContextFull, e.Prompt, e.Context)
}

func (e *ContextError) Unwrap() error { return ErrContextFull }
