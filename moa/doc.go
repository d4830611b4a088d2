// Package moa is the Mixture-of-Agents strategy, both sides of it.
//
// Serving: a Server holds whole role models (reasoner, writer, concise,
// critic, factchecker, drafter, spotter, aggregator) and answers requests on
// the /swarm/moa/1.0.0 stream protocol (and /swarm/moa/1.1.0, whose token
// frames also carry the model's reasoning), streaming tokens and then metrics;
// it answers "busy" at once when all its slots are taken and stops
// generating when the originator goes away.
//
// Originating (any peer, even one holding no model): classify the query
// (spotter role, strict parse, else rules), fan out in parallel to the best
// live peer of each target role (only holders whose role model this peer
// verified get a prompt, unless the user allows unverified ones; never as
// spotter or aggregator), wait up to a deadline set by the query's
// complexity, aggregate with the aggregator role (or pick the best answer),
// and report who answered. Speed mode has a drafter answer and a reasoner
// verify it. Only text crosses the network.
//
// It must not build hosts or keep the peer table: it reads the swarm view
// and opens streams on the host it is given.
package moa
