// Package pipeline is pipeline-parallel inference across peers, both sides
// of it.
//
// Serving: a StageServer holds layer shards (stage GGUF slices) and answers
// /swarm/stage/1.0.0. A session is opened along a route: each stage opens the
// next one, hidden states flow stage to stage (fp16 by default, f32
// selectable), and the last stage returns the sampled token (or the logits)
// back along the chain. Closing or resetting a stream closes the session
// downstream.
//
// Originating: Partition recommends a placement; AssembleRoute picks a chain
// of live holders covering the model's layers; the Originator tokenizes,
// streams the prompt and the generated tokens through the chain, and when a
// stage dies it assembles a new route, replays the tokens to rebuild the KV
// caches and carries on, so greedy output equals a single machine's.
//
// It must not build hosts or keep the peer table: it reads the swarm view
// through the functions it is given and opens streams on the host.
package pipeline
