package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes that reads and writes JSON as a string with
// a unit: "512MiB", "1.5GiB", "800MB". A bare number is refused, as with
// Duration: 2 would silently mean two bytes.
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseByteSize reads "1.5GiB", "800MB" or "4096B".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	for _, u := range byteUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || !(v >= 0) || v*u.mult > math.MaxInt64/2 {
			break
		}
		return ByteSize(v * u.mult), nil
	}
	return 0, fmt.Errorf("size %q: want a number with a unit, such as 512MiB, 1.5GiB or 800MB", s)
}

// String writes the size in the largest binary unit below it, to a
// tenth: "1.5GiB", "512MiB".
func (b ByteSize) String() string {
	v := float64(b)
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	for i := len(units) - 1; i >= 0; i-- {
		if mult := float64(int64(1) << (10 * (i + 1))); v >= mult {
			return strings.TrimSuffix(strconv.FormatFloat(v/mult, 'f', 1, 64), ".0") + units[i]
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalJSON implements json.Marshaler.
func (b ByteSize) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.FormatInt(int64(b), 10) + "B")
}

// UnmarshalJSON implements json.Unmarshaler.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("size %s: want a string with a unit, such as \"1.5GiB\"", bytes.TrimSpace(data))
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}
