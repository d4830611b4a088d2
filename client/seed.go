package client

import (
	"bytes"
	"strconv"

	"github.com/llmswarm/llmswarm/answer"
)

// Seed is a sampling seed: any uint64, the value X-Swarm-Seed prints.
// Every surface that takes a seed reads it with ParseSeed, so a seed the
// swarm printed replays wherever it is given: in JSON as an integer or as
// a string of one (clients whose numbers are float64, as JavaScript's,
// round a seed above 2^53 and keep it exact only as a string). A negative
// integer, as OpenAI's signed seeds allow, stands for its two's
// complement (-1 is 18446744073709551615). It is written as a plain
// integer, every digit exact.
type Seed uint64

// UnmarshalJSON reads an integer or a string of one (ParseSeed). Its
// error is the caller's mistake (answer.BadRequest), naming the field.
func (s *Seed) UnmarshalJSON(b []byte) error {
	t := string(bytes.TrimSpace(b))
	if len(t) > 0 && t[0] == '"' {
		u, err := strconv.Unquote(t)
		if err != nil {
			return answer.Errorf(answer.BadRequest, "field seed: %s is not an integer", t)
		}
		t = u
	}
	v, err := ParseSeed(t)
	if err != nil {
		return answer.Errorf(answer.BadRequest, "field seed: %v", err)
	}
	*s = v
	return nil
}

// ParseSeed reads a seed written in decimal: 0 to 2^64-1, or a negative
// integer down to -2^63 for its two's complement.
func ParseSeed(t string) (Seed, error) {
	if u, err := strconv.ParseUint(t, 10, 64); err == nil {
		return Seed(u), nil
	}
	if i, err := strconv.ParseInt(t, 10, 64); err == nil && i < 0 {
		return Seed(uint64(i)), nil
	}
	return 0, &seedError{t}
}

type seedError struct{ text string }

func (e *seedError) Error() string {
	return strconv.Quote(e.text) + " is not an integer from -2^63 to 2^64-1 (give a seed above 2^53 as a string, \"seed\": \"18446744073709551615\", where JSON numbers are float64)"
}

// String is the seed in decimal, as X-Swarm-Seed gives it.
func (s Seed) String() string { return strconv.FormatUint(uint64(s), 10) }
