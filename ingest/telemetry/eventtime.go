package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// TimeUnit says how a numeric event-time field is read.
type TimeUnit string

// Time units. TimeAuto picks by magnitude: below 1e11 seconds, below 1e14
// milliseconds, below 1e17 microseconds, else nanoseconds (so any time
// between 1973 and 5138 is read right whatever the unit). Strings are always
// read as RFC 3339 whatever the unit.
const (
	TimeAuto    TimeUnit = "auto"
	TimeSeconds TimeUnit = "s"
	TimeMillis  TimeUnit = "ms"
	TimeMicros  TimeUnit = "us"
	TimeNanos   TimeUnit = "ns"
)

// ParseTimeUnit accepts auto, s, ms, us (or µs), ns.
func ParseTimeUnit(s string) (TimeUnit, error) {
	switch TimeUnit(strings.ReplaceAll(s, "µ", "u")) {
	case "", TimeAuto:
		return TimeAuto, nil
	case TimeSeconds, TimeMillis, TimeMicros, TimeNanos:
		return TimeUnit(strings.ReplaceAll(s, "µ", "u")), nil
	}
	return "", fmt.Errorf("%w: time unit %q: want auto, s, ms, us or ns", ErrConfig, s)
}

// timeStatus is the outcome of reading the event-time field.
type timeStatus int

const (
	timeOK      timeStatus = iota
	timeMissing            // no such field (or the payload is not a JSON object)
	timeInvalid            // the field exists but is not a usable time
)

// fieldPath splits a dotted field name ("meta.ts") into its keys.
func fieldPath(field string) []string { return strings.Split(field, ".") }

// eventTime reads the event time (Unix ns) from a JSON object payload at
// path. The payload must already be known to be valid JSON.
func eventTime(payload []byte, path []string, unit TimeUnit) (int64, timeStatus) {
	raw := payload
	for _, key := range path {
		v, ok := objectField(raw, key)
		if !ok {
			return 0, timeMissing
		}
		raw = v
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, timeInvalid
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, timeInvalid
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		// UnixNano wraps outside 1677-2262: such a time is invalid, not wrapped.
		if err != nil || !t.After(time.Unix(0, 0)) || t.After(time.Unix(0, math.MaxInt64)) {
			return 0, timeInvalid
		}
		return t.UnixNano(), timeOK
	}
	ns, ok := numberToNanos(string(raw), unit)
	if !ok {
		return 0, timeInvalid
	}
	return ns, timeOK
}

// numberToNanos converts a JSON number in unit to Unix ns; integers are
// converted exactly, fractions via float64.
func numberToNanos(s string, unit TimeUnit) (int64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		return 0, false
	}
	if unit == TimeAuto {
		switch {
		case f < 1e11:
			unit = TimeSeconds
		case f < 1e14:
			unit = TimeMillis
		case f < 1e17:
			unit = TimeMicros
		default:
			unit = TimeNanos
		}
	}
	var mul int64
	switch unit {
	case TimeSeconds:
		mul = 1e9
	case TimeMillis:
		mul = 1e6
	case TimeMicros:
		mul = 1e3
	default:
		mul = 1
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i > math.MaxInt64/mul {
			return 0, false
		}
		return i * mul, true
	}
	ns := f * float64(mul)
	if ns >= math.MaxInt64 {
		return 0, false
	}
	return int64(math.Round(ns)), true
}
