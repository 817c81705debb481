package wire

import (
	"errors"
	"net/textproto"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestHeaderValueEncoding(t *testing.T) {
	for in, want := range map[string]string{
		"":              "",
		"telemetry/d1":  "telemetry/d1",
		"drône ✈":       "drône ✈",
		"a b":           "a b",
		"telemetry/d1 ": "%telemetry/d1%20",
		" x":            "%%20x",
		"a\r\nb":        "%a%0D%0Ab",
		"%41":           "%%2541",
		"x\x00y\x7f":    "%x%00y%7F",
		"a\tb":          "%a%09b",
	} {
		got := EncodeHeaderValue(in)
		if got != want {
			t.Errorf("EncodeHeaderValue(%q) = %q, want %q", in, got, want)
		}
		back, err := DecodeHeaderValue(got)
		if err != nil || back != in {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v; want %q", got, back, err, in)
		}
	}
	for _, bad := range []string{"%", "%abc", "%a b", "%%2", "%%zz", "%%41", " x", "x\r", "%x%0"} {
		if v, err := DecodeHeaderValue(bad); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v; want ErrCorruptRecord", bad, v, err)
		}
	}
}

// FuzzHeaderValue: every value survives encoding, the NATS header
// codec (as nats.go writes and reads a header block) and decoding
// byte-exact, and decoding accepts only what encoding produces.
func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"", "telemetry/d1 ", " ", "\r\n", "%", "%20", "a\tb", "drône", "\xff\xfe", "x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		enc := EncodeHeaderValue(v)
		m := nats.NewMsg("s")
		m.Header.Set("Edge-Writer", enc)
		m.Data = []byte("x")
		// Through nats.go's header codec: what the server stores and a
		// reader gets.
		h, err := nats.DecodeHeadersMsg(headerBlock(m.Header))
		if err != nil {
			t.Fatalf("header block of %q: %v", enc, err)
		}
		got, err := DecodeHeaderValue(h.Get("Edge-Writer"))
		if err != nil || got != v {
			t.Fatalf("%q → %q → %q, %v", v, enc, got, err)
		}
		// Decoding is strict: a value it accepts re-encodes to itself.
		if dv, err := DecodeHeaderValue(v); err == nil && EncodeHeaderValue(dv) != v {
			t.Fatalf("DecodeHeaderValue(%q) = %q re-encodes to %q", v, dv, EncodeHeaderValue(dv))
		}
	})
}

// headerBlock writes h as nats.go puts it on the wire.
func headerBlock(h nats.Header) []byte {
	b := []byte("NATS/1.0\r\n")
	for k, vs := range h {
		for _, v := range vs {
			b = append(b, k+": "+trimHeaderValue(v)+"\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}

// trimHeaderValue is what nats.go (writeHeaderValue) does to a header
// value on the wire: trims ASCII white space and turns CR and LF into
// spaces. TestHeaderValuesRoundTripThroughServer checks the real path.
func trimHeaderValue(v string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(textproto.TrimString(v))
}
