// Package answer holds what a query's answer is, defined once: the body of
// POST /v1/swarm/query (Result), each agent's answer in it (Agent, Draft),
// a pipeline generation (Pipeline, HopStat, Reroute), its routes (Hop)
// and the progress it reports as it goes (Trace); and, for a request of
// the API that fails, a query or any other, what kind of failure it was
// (Kind, Error).
//
// Data flows one way through it: moa and pipeline fill these types, node
// passes them up unchanged, and api, mobile, client and swarmctl read
// them as they are, with no copy kept in step anywhere. Their JSON is the
// HTTP API's: a key's name or shape changes only with the API. Failures
// flow the same way: node says which Kind an error is, api alone maps the
// kind to an HTTP status, and mobile reports the kind as it is.
//
// It must import nothing but the standard library (swarmctl links it, and
// swarmctl links no libp2p and no cgo), hold no behaviour beyond what its
// values mean, and know nothing of HTTP.
package answer
