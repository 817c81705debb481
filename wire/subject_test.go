package wire

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/edge-agent/edge-agent/localstream"
)

func TestEscapeToken(t *testing.T) {
	for in, want := range map[string]string{
		"drone-1":     "drone-1",
		"":            "%",
		"fleet.a/7":   "fleet%2Ea%2F7",
		"a b*>":       "a%20b%2A%3E",
		"100%":        "100%25",
		"drône":       "dr%C3%B4ne",
		"UPPER_lower": "UPPER_lower",
	} {
		got := EscapeToken(in)
		if got != want {
			t.Errorf("EscapeToken(%q) = %q, want %q", in, got, want)
		}
		back, err := UnescapeToken(got)
		if err != nil || back != in {
			t.Errorf("UnescapeToken(%q) = %q, %v; want %q", got, back, err, in)
		}
	}
	for _, bad := range []string{"", "a.b", "%2", "%zz", "%41", "%2e", "a*"} {
		if _, err := UnescapeToken(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("UnescapeToken(%q) = %v, want ErrBadToken", bad, err)
		}
	}
}

func TestParseSubject(t *testing.T) {
	p, err := parseSubject(DataSubject("video", "agent.1", "drone 7"))
	if err != nil || p.kind != subjectData || p.agent != "agent.1" || p.routingKey != "drone 7" || p.stream != "video" {
		t.Fatalf("data: %+v %v", p, err)
	}
	p, err = parseSubject(CutSubject("telemetry", "a"))
	if err != nil || p.kind != subjectCut || p.agent != "a" {
		t.Fatalf("cut: %+v %v", p, err)
	}
	for _, bad := range []string{"edge.video", "x.video.a.cut", "edge.video.a.data", "edge.video.a.other.x"} {
		if _, err := parseSubject(bad); err == nil {
			t.Errorf("parseSubject(%q) accepted", bad)
		}
	}
}

// FuzzToken: every string escapes to a valid token that unescapes back;
// every accepted token re-escapes to itself (one token per string).
func FuzzToken(f *testing.F) {
	for _, s := range []string{"drone-1", "", "a.b", "%41", "%2E", "dr%C3%B4ne", "*>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := EscapeToken(s)
		if strings.ContainsAny(tok, ".*> \t\r\n") || !utf8.ValidString(tok) {
			t.Fatalf("EscapeToken(%q) = %q is not a valid token", s, tok)
		}
		back, err := UnescapeToken(tok)
		if err != nil || back != s {
			t.Fatalf("round trip %q -> %q -> %q, %v", s, tok, back, err)
		}
		if u, err := UnescapeToken(s); err == nil && EscapeToken(u) != s {
			t.Fatalf("token %q accepted as %q but escapes to %q", s, u, EscapeToken(u))
		}
	})
}

func TestKeyTokenBounded(t *testing.T) {
	for _, key := range []string{strings.Repeat("x", 4050), strings.Repeat("é.", 700), strings.Repeat("a", 126) + "%", strings.Repeat(".", 43)} {
		tok := KeyToken(key)
		if len(tok) > MaxTokenBytes || !hashedToken(tok) {
			t.Fatalf("KeyToken of %d bytes: %q (%d bytes)", len(key), tok, len(tok))
		}
		if strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("token %q is not a subject token", tok)
		}
		m := EncodeEvent("telemetry", "a", 1, localstream.Record{Event: localstream.Event{RoutingKey: key, Writer: "w"}})
		ev, err := DecodeEvent(m.Subject, m.Header, m.Data)
		if err != nil || ev.Record.RoutingKey != key {
			t.Fatalf("round trip of a %d-byte key: %v", len(key), err)
		}
		// A header that does not match the token is refused.
		m.Header.Set(HdrRoutingKey, key+"x")
		if _, err := DecodeEvent(m.Subject, m.Header, m.Data); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("mismatched key header: %v", err)
		}
	}
	if KeyToken("drone-1") != "drone-1" || KeyToken(strings.Repeat("y", MaxTokenBytes)) != strings.Repeat("y", MaxTokenBytes) {
		t.Fatal("short keys must keep their plain token")
	}
	if KeyToken(strings.Repeat("z", 200)) == KeyToken(strings.Repeat("z", 201)) {
		t.Fatal("keys with a common prefix share a token")
	}
}

// FuzzKeyToken: every key's token is a bounded subject token that gives
// the key back (directly or through the header).
func FuzzKeyToken(f *testing.F) {
	for _, s := range []string{"", "drone-1", strings.Repeat("é", 100), strings.Repeat("a.b", 50)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		tok := KeyToken(key)
		if len(tok) > MaxTokenBytes || tok == "" || strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("KeyToken(%q) = %q", key, tok)
		}
		m := EncodeEvent("telemetry", "a", 1, localstream.Record{Event: localstream.Event{RoutingKey: key}})
		ev, err := DecodeEvent(m.Subject, m.Header, m.Data)
		if err != nil || ev.Record.RoutingKey != key {
			t.Fatalf("key %q: token %q: %v", key, tok, err)
		}
	})
}
