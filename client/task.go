package client

// Task is one long-running job on a peer that a user waits for: a model
// pull, a shard fetch, a model load, a synth or a slice. It is what the
// API's progress events carry, what `swarmctl status` lists while it runs,
// and what a terminal shows as a bar.
type Task struct {
	// ID names the task on this peer while it runs ("pull-3").
	ID string `json:"id"`
	// Kind is "pull", "fetch", "load", "synth" or "slice".
	Kind string `json:"kind"`
	// Name is what the task works on: a model reference, a path, a
	// "CID:A-B" shard.
	Name string `json:"name"`
	// Stage is the step the task is in ("resolve", "download", "verify",
	// "store", "announce", "tensors", "kv"...), free text for people.
	Stage string `json:"stage,omitempty"`
	// Done and Total count Unit ("bytes" or "tensors"); Total is 0 while
	// unknown.
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit,omitempty"`
	// StartedMS is when the task began, in Unix milliseconds.
	StartedMS int64 `json:"started_ms"`
	// State is "running", "done" or "failed"; Error says why it failed.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}
