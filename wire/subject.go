package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

const hexDigits = "0123456789ABCDEF"

// EscapeToken turns s into a valid NATS subject token (docs/central-format.md).
func EscapeToken(s string) string {
	if s == "" {
		return "%"
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plainByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// UnescapeToken reverses EscapeToken. It rejects tokens EscapeToken never
// produces, so that each string has exactly one token.
func UnescapeToken(tok string) (string, error) {
	if tok == "%" {
		return "", nil
	}
	if tok == "" {
		return "", fmt.Errorf("%w: empty token", ErrBadToken)
	}
	if !strings.Contains(tok, "%") {
		for i := 0; i < len(tok); i++ {
			if !plainByte(tok[i]) {
				return "", fmt.Errorf("%w: byte %#x in %q", ErrBadToken, tok[i], tok)
			}
		}
		return tok, nil
	}
	out := make([]byte, 0, len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if plainByte(c) {
			out = append(out, c)
			continue
		}
		if c != '%' || i+2 >= len(tok) {
			return "", fmt.Errorf("%w: %q at %d", ErrBadToken, tok, i)
		}
		hi, lo := unhex(tok[i+1]), unhex(tok[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: bad escape in %q at %d", ErrBadToken, tok, i)
		}
		v := byte(hi<<4 | lo)
		if plainByte(v) {
			return "", fmt.Errorf("%w: needless escape of %q in %q", ErrBadToken, v, tok)
		}
		out = append(out, v)
		i += 2
	}
	return string(out), nil
}

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// unhex decodes an upper-case hex digit, -1 otherwise.
func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// StreamName is the JetStream stream of a local stream: EDGE_<STREAM>.
func StreamName(stream string) string {
	return "EDGE_" + strings.ToUpper(stream)
}

// MaxTokenBytes bounds a subject token: an agent id or a routing key
// whose escaped form is longer becomes a hashed token (KeyToken), so that
// a subject stays far below the server's control line (4,096 bytes by
// default) whatever a drone calls itself.
const MaxTokenBytes = 128

// hashMark separates a hashed token's prefix from its hash. EscapeToken
// never writes "%%", so no plain or escaped token contains it.
const hashMark = "%%"

// hashHexLen is the hex digits of SHA-256 a hashed token ends with.
const hashHexLen = 32

// KeyToken is the subject token of a routing key: EscapeToken(key) when
// that fits MaxTokenBytes, otherwise a hashed token — the longest prefix
// of the escaped key that leaves room (cut between escapes), "%%", and the
// first 16 bytes of SHA-256(key) in lower-case hex. A hashed token does
// not hold the key: the message carries it in the Edge-Routing-Key header.
func KeyToken(key string) string {
	tok := EscapeToken(key)
	if len(tok) <= MaxTokenBytes {
		return tok
	}
	n := MaxTokenBytes - len(hashMark) - hashHexLen
	for n > 0 && n < len(tok) && (tok[n-1] == '%' || n >= 2 && tok[n-2] == '%') {
		n-- // never cut inside a %XX escape
	}
	sum := sha256.Sum256([]byte(key))
	return tok[:n] + hashMark + hex.EncodeToString(sum[:hashHexLen/2])
}

// hashedToken reports whether tok is a hashed token (see KeyToken).
func hashedToken(tok string) bool { return strings.Contains(tok, hashMark) }

// DataSubject is the subject of one event.
func DataSubject(stream, agent, routingKey string) string {
	return dataSubject(stream, agent, KeyToken(routingKey))
}

func dataSubject(stream, agent, keyToken string) string {
	return "edge." + stream + "." + EscapeToken(agent) + ".data." + keyToken
}

// CutSubject is the subject of an agent's commit records.
func CutSubject(stream, agent string) string {
	return "edge." + stream + "." + EscapeToken(agent) + ".cut"
}

// PartSubject is the subject of the leading message of a layout-2
// transaction split in two (docs/central-format.md).
func PartSubject(stream, agent string) string {
	return "edge." + stream + "." + EscapeToken(agent) + ".part"
}

// subjectKind is what a parsed subject is.
type subjectKind int

const (
	subjectData subjectKind = iota + 1
	subjectCut
	subjectPart
)

// parsedSubject is a decoded central subject.
type parsedSubject struct {
	kind       subjectKind
	stream     string
	agent      string
	routingKey string
	// keyToken is the routing key's token; when it is hashed, routingKey
	// is empty and the key comes from the Edge-Routing-Key header.
	keyToken string
}

// parseSubject decodes a central subject.
func parseSubject(subj string) (parsedSubject, error) {
	parts := strings.Split(subj, ".")
	if len(parts) < 4 || parts[0] != "edge" {
		return parsedSubject{}, fmt.Errorf("%w: subject %q is not edge.<stream>.<agent>.<kind>", ErrCorruptRecord, subj)
	}
	agent, err := UnescapeToken(parts[2])
	if err != nil {
		return parsedSubject{}, err
	}
	p := parsedSubject{stream: parts[1], agent: agent}
	switch {
	case len(parts) == 4 && parts[3] == "cut":
		p.kind = subjectCut
	case len(parts) == 4 && parts[3] == "part":
		p.kind = subjectPart
	case len(parts) == 5 && parts[3] == "data":
		p.kind, p.keyToken = subjectData, parts[4]
		if hashedToken(p.keyToken) {
			break
		}
		if p.routingKey, err = UnescapeToken(p.keyToken); err != nil {
			return parsedSubject{}, err
		}
	default:
		return parsedSubject{}, fmt.Errorf("%w: subject %q is neither data, part nor cut", ErrCorruptRecord, subj)
	}
	return p, nil
}
