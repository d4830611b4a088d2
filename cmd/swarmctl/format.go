package main

import (
	"encoding/json"
	"fmt"
	"io"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func decodeRaw(raw []byte, v any) error {
	if len(raw) == 0 {
		return fmt.Errorf("the answer has no pipeline trace")
	}
	return json.Unmarshal(raw, v)
}
