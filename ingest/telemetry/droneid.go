package telemetry

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxDroneIDBytes bounds a drone id (the routing key; the writer id is
// "telemetry/<id>", and watermark writer ids are at most 255 bytes).
const MaxDroneIDBytes = 128

// mappedPrefixBytes is how much of an id a mapped id keeps before "~<hash>".
const mappedPrefixBytes = 96

// DroneID returns the drone id for a topic level. An id of 1 to
// MaxDroneIDBytes bytes of UTF-8 without control characters is kept as is
// (spaces, unicode and ". * > %" included: the central layer escapes what
// its subjects cannot hold). Any other id is mapped, deterministically, to
// its first bytes (at most 96, control characters and invalid UTF-8 as
// '_', cut at a character boundary), '~' and the first 16 hex digits of
// the SHA-256 of the whole level — at most 113 bytes — and mapped is true.
// The event keeps the original topic in its mqtt-topic header.
func DroneID(level string) (id string, mapped bool) {
	if validDroneID(level) {
		return level, false
	}
	var b strings.Builder
	for _, r := range level {
		if r == utf8.RuneError || unicode.IsControl(r) {
			r = '_'
		}
		if b.Len()+utf8.RuneLen(r) > mappedPrefixBytes {
			break
		}
		b.WriteRune(r)
	}
	sum := sha256.Sum256([]byte(level))
	b.WriteByte('~')
	b.WriteString(hex.EncodeToString(sum[:8]))
	return b.String(), true
}

func validDroneID(s string) bool {
	if len(s) == 0 || len(s) > MaxDroneIDBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}
