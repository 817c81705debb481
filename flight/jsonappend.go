package flight

import (
	"encoding/json"
	"math"
	"strconv"
)

// The record's JSON messages that are written once per event (entries,
// positions) are appended by hand: encoding/json's reflection cost a
// third of writing an event's entry (BenchmarkExportFlight's profile).
// The bytes are encoding/json's, field for field (TestEntryJSON,
// TestLocationFixJSON): the hash chain runs over an entry's bytes, and
// CheckCentral compares a chain written by one version with one written
// by another.

// appendJSONString appends s as encoding/json writes it: plain printable
// ASCII as it is, anything else through encoding/json (escapes, HTML
// characters, invalid UTF-8).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json writes a float64 (ok false
// for NaN and infinities, which JSON cannot hold).
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	fmt := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	b = strconv.AppendFloat(b, f, fmt, -1, 64)
	if fmt == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
