// Package engine runs GGUF language models on the CPU through ollama's Go
// engine (github.com/ollama/ollama v0.17.4: ml, ml/backend/ggml, kvcache,
// model, tokenizer, fs/ggml) and adds what the swarm needs on top of it:
//
//   - Load of a whole model or of a stage slice (a GGUF holding only layers
//     [a,b), see shards.Slice), with a report of the weight memory it holds;
//   - Sessions: several concurrent sequences per loaded model, each with its
//     own KV cache slot, an idle TTL and truncation to a prefix (replay after
//     a pipeline stage fails over); ErrCapacity when every slot is taken;
//   - Session.RunRange: layers [a,b) over token ids (a == 0) or hidden states
//     (a > 0), returning hidden states, or logits when b is the last layer;
//   - Model.Generate: whole-model chat generation with streaming, sampling,
//     cancellation and metrics (the Mixture-of-Agents role path);
//   - the originator's tools, usable without running any layer: Tokenizer
//     (with chat templates), Sampler, fp16 wire helpers;
//   - Synth, the synthetic random-weight model writer used by tests and demos.
//
// It is the only package in the module that imports ollama or uses cgo. It must
// not import libp2p or any other package of this module (tests may import
// shards). Panics raised inside ollama on broken input are recovered at this
// package's boundary and returned as errors.
//
// ggml's CPU backend object is shared by every model loaded in the process and
// is not safe for concurrent graph computation, so all computation in this
// package is serialized by one process-wide lock; concurrency between sessions
// is interleaving, step by step, not parallel execution.
package engine
