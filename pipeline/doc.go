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
// Trusting no stage: a stage refuses bad numbers from the hop before it
// and checks what comes back from the hop after it, and one remote peer
// gets only a share of its sessions (stagecap.go). The originator leaves a
// peer out only on evidence it saw itself; another peer's word is an
// accusation, which costs the accused nothing (blame.go). Generations
// through unproven peers, and a share of the others, run on a second route
// too, and a disagreement is settled by probes of single hops that the
// originator opens and checks itself (spotcheck.go).
//
// It must not build hosts or keep the peer table: it reads the swarm view
// through the functions it is given and opens streams on the host.
package pipeline
