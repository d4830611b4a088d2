package answer

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestKindOf(t *testing.T) {
	busy := Wrap(Busy, errors.New("every agent at its limit"))
	cases := []struct {
		err  error
		want Kind
	}{
		{busy, Busy},
		{fmt.Errorf("query: %w", busy), Busy}, // found through wrapping
		{Errorf(BadRequest, "the prompt does not fit: %w", busy), BadRequest}, // the outermost kind decides
		{Errorf(Timeout, "no answer within 1s: %w", context.DeadlineExceeded), Timeout},
		{errors.New("unforeseen"), Internal},
	}
	for _, c := range cases {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("KindOf(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	if err := Errorf(Timeout, "after %s: %w", "1s", context.DeadlineExceeded); err.Error() != "after 1s: context deadline exceeded" ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Errorf: %v does not read or unwrap as its cause", err)
	}
}
