package wire

import (
	"fmt"
	"strings"
)

// Header values travel byte-exact although NATS alters some: nats.go
// trims surrounding white space and turns CR and LF into spaces. A value
// that NATS would alter, or that could be mistaken for an encoded one, is
// sent percent-encoded behind a '%' prefix (docs/central-format.md):
//
//	plain   no byte < 0x20 or = 0x7F, no leading or trailing space,
//	        not starting with '%'                     → sent as it is
//	other   '%' + the value with every byte < 0x21, '%' and 0x7F
//	        written as %XX (upper-case hex)           → "telemetry/d1 " is "%telemetry/d1%20"
//
// Bytes ≥ 0x80 (UTF-8) pass unchanged in both forms.

// EncodeHeaderValue returns v as a header value that NATS delivers
// unchanged.
func EncodeHeaderValue(v string) string {
	if headerPlain(v) {
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 8)
	b.WriteByte('%')
	for i := 0; i < len(v); i++ {
		c := v[i]
		if headerEscaped(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// DecodeHeaderValue reverses EncodeHeaderValue. It rejects encodings
// EncodeHeaderValue never produces, so each value has exactly one form.
func DecodeHeaderValue(s string) (string, error) {
	if !strings.HasPrefix(s, "%") {
		if !headerPlain(s) {
			return "", fmt.Errorf("%w: header value %q is neither plain nor encoded", ErrCorruptRecord, s)
		}
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if headerEscaped(c) {
				return "", fmt.Errorf("%w: header value %q: byte %#x at %d not escaped", ErrCorruptRecord, s, c, i)
			}
			out = append(out, c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: header value %q: short escape at %d", ErrCorruptRecord, s, i)
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 || !headerEscaped(byte(hi<<4|lo)) {
			return "", fmt.Errorf("%w: header value %q: bad escape at %d", ErrCorruptRecord, s, i)
		}
		out = append(out, byte(hi<<4|lo))
		i += 2
	}
	v := string(out)
	if headerPlain(v) {
		return "", fmt.Errorf("%w: header value %q: needless encoding", ErrCorruptRecord, s)
	}
	return v, nil
}

// headerPlain reports whether v travels unchanged and unambiguously.
func headerPlain(v string) bool {
	if v == "" {
		return true
	}
	if v[0] == '%' || v[0] == ' ' || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// headerEscaped reports whether the encoded form writes c as %XX.
func headerEscaped(c byte) bool { return c <= ' ' || c == '%' || c == 0x7f }
