package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/llmswarm/llmswarm/answer"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// pipelineOf is the pipeline generation of a pipeline-mode answer.
func pipelineOf(res *answer.Result) (*answer.Pipeline, error) {
	if res.Pipeline == nil {
		return nil, fmt.Errorf("the answer has no pipeline trace")
	}
	return res.Pipeline, nil
}
