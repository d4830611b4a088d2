// Package shards owns model files as the swarm sees them: content IDs (CIDv1,
// raw codec, sha2-256 of the GGUF bytes), GGUF metadata read in pure Go, layer
// slicing of GGUF files, the local store and the shard-transfer protocol.
//
// It must not import the inference engine (internal/engine) or ollama, and it
// must not construct libp2p hosts: it is tier 0 and is imported by the swarm
// view, the strategies and the node.
package shards
