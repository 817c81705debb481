package devices

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Threshold is an amount of free disk space: a number of bytes, or a
// percentage of the filesystem's size. Text form: "10%", "2GiB", "512MB",
// "1048576" (units B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB
// = powers of 1024; case-insensitive).
type Threshold struct {
	// Bytes is the amount in bytes when Percent is 0.
	Bytes int64
	// Percent, when not 0, is the amount as a percentage of the filesystem size.
	Percent float64
}

// IsZero reports whether the threshold is unset.
func (t Threshold) IsZero() bool { return t.Bytes == 0 && t.Percent == 0 }

// Resolve returns the threshold in bytes for a filesystem of total bytes.
func (t Threshold) Resolve(total int64) int64 {
	if t.Percent != 0 {
		return int64(t.Percent / 100 * float64(total))
	}
	return t.Bytes
}

// String returns the text form.
func (t Threshold) String() string {
	if t.Percent != 0 {
		return strconv.FormatFloat(t.Percent, 'f', -1, 64) + "%"
	}
	return strconv.FormatInt(t.Bytes, 10)
}

// MarshalText implements encoding.TextMarshaler.
func (t Threshold) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (YAML and JSON strings).
func (t *Threshold) UnmarshalText(b []byte) error {
	v, err := ParseThreshold(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

var units = []struct {
	suffix string
	mult   float64
}{ // longest suffixes first
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
}

// ParseThreshold parses a threshold's text form.
func ParseThreshold(s string) (Threshold, error) {
	in := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(in, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || v <= 0 || v >= 100 {
			return Threshold{}, fmt.Errorf("%w: %q: a percentage must be a number in (0, 100) followed by %%", ErrThreshold, s)
		}
		return Threshold{Percent: v}, nil
	}
	num, mult := strings.ToLower(in), 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v*mult > math.MaxInt64/2 {
		return Threshold{}, fmt.Errorf("%w: %q: want bytes such as 2GiB, 500MB or 1073741824, or a percentage such as 10%%", ErrThreshold, s)
	}
	return Threshold{Bytes: int64(v * mult)}, nil
}
