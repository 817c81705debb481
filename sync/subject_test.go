package sync

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
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
