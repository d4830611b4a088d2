package node

import (
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/wire"
)

// The JSON an embedder hands the node (the gomobile facade in mobile/):
// a config, as swarmd's file holds it, and a query, as POST
// /v1/swarm/query takes it. Both are read here, by the same code the
// file and the API use, so the three never disagree.

// ParseConfig decodes a JSON config strictly: an unknown key or data after
// the object is an error, so a typo does not silently fall back to a
// default. It does not apply defaults or validate values (Validate does).
func ParseConfig(b []byte) (Config, error) {
	var c Config
	if err := wire.DecodeJSON(b, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ParseQuery decodes and checks a query as POST /v1/swarm/query does,
// with the same errors: an unknown field, a field of the wrong type, an
// empty query or a value out of range is an error that names it, whose
// kind is answer.BadRequest.
func ParseQuery(b []byte) (client.QueryRequest, error) {
	var req client.QueryRequest
	if err := wire.DecodeRequest(b, &req); err != nil {
		return client.QueryRequest{}, requestError(err)
	}
	if _, err := specFromQuery(req); err != nil {
		return client.QueryRequest{}, err
	}
	return req, nil
}
