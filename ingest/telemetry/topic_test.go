package telemetry

import (
	"errors"
	"testing"
)

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pattern, topic, drone string
		ok                    bool
	}{
		{"drones/{drone}/telemetry/#", "drones/d1/telemetry", "d1", true},
		{"drones/{drone}/telemetry/#", "drones/d1/telemetry/gps", "d1", true},
		{"drones/{drone}/telemetry/#", "drones/d1/telemetry/gps/raw", "d1", true},
		{"drones/{drone}/telemetry/#", "drones/d1/status", "", false},
		{"drones/{drone}/telemetry/#", "drones//telemetry/x", "", false},
		{"drones/{drone}/telemetry/#", "$SYS/d1/telemetry/x", "", false},
		{"drones/{drone}/status", "drones/d7/status", "d7", true},
		{"drones/{drone}/status", "drones/d7/status/x", "", false},
		{"drones/{drone}/status", "drones/d7", "", false},
		{"+/{drone}/mav", "site/dx/mav", "dx", true},
		{"{drone}/#", "abc", "abc", true},
		{"{drone}/#", "abc/def", "abc", true},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Fatalf("%s: %v", c.pattern, err)
		}
		d, ok := p.Match(c.topic)
		if d != c.drone || ok != c.ok {
			t.Errorf("%s ~ %s = %q,%v want %q,%v", c.pattern, c.topic, d, ok, c.drone, c.ok)
		}
	}
}

// TestPatternForms: every accepted form of a pattern, the drone level it
// captures, its subscription filter, and every refused form with its message.
func TestPatternForms(t *testing.T) {
	ok := []struct {
		pattern, filter, topic, drone string
	}{
		{"drones/{drone}/telemetry/#", "drones/+/telemetry/#", "drones/d1/telemetry/gps", "d1"},
		{"drones/+/telemetry", "drones/+/telemetry", "drones/d2/telemetry", "d2"},
		{"drones/+/telemetry/#", "drones/+/telemetry/#", "drones/d3/telemetry/a/b", "d3"},
		{"+", "+", "d4", "d4"},
		{"+/#", "+/#", "d5/x", "d5"},
		{"site/+/{drone}/mav", "site/+/+/mav", "site/s1/d6/mav", "d6"},
		{"{drone}", "+", "d7", "d7"},
	}
	for _, c := range ok {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Errorf("%q: %v", c.pattern, err)
			continue
		}
		if p.Filter() != c.filter {
			t.Errorf("%q: filter %q want %q", c.pattern, p.Filter(), c.filter)
		}
		if d, matched := p.Match(c.topic); !matched || d != c.drone {
			t.Errorf("%q ~ %q = %q,%v want %q", c.pattern, c.topic, d, matched, c.drone)
		}
	}
	bad := []struct{ pattern, msg string }{
		{"", `telemetry: invalid topic pattern "": empty`},
		{"drones/x/telemetry", `telemetry: invalid topic pattern "drones/x/telemetry": no drone level: mark it with {drone} or a single + (e.g. drones/+/telemetry)`},
		{"drones/+/+/telemetry", `telemetry: invalid topic pattern "drones/+/+/telemetry": several + levels: mark the drone level with {drone}`},
		{"a/{drone}/{drone}", `telemetry: invalid topic pattern "a/{drone}/{drone}": {drone} twice`},
		{"a/#/{drone}", `telemetry: invalid topic pattern "a/#/{drone}": '#' must be the last level`},
		{"a/x{drone}", `telemetry: invalid topic pattern "a/x{drone}": level "x{drone}" mixes wildcards or braces with text`},
		{"a/b#/{drone}", `telemetry: invalid topic pattern "a/b#/{drone}": level "b#" mixes wildcards or braces with text`},
	}
	for _, c := range bad {
		_, err := ParsePattern(c.pattern)
		if !errors.Is(err, ErrPattern) || err.Error() != c.msg {
			t.Errorf("%q: err %v\n want %s", c.pattern, err, c.msg)
		}
	}
	p, _ := ParsePattern("drones/{drone}/telemetry/#")
	if p.Filter() != "drones/+/telemetry/#" {
		t.Fatal(p.Filter())
	}
}

func FuzzPatternMatch(f *testing.F) {
	f.Add("drones/{drone}/telemetry/#", "drones/d1/telemetry/x")
	f.Add("{drone}", "")
	f.Add("a/+/{drone}/#", "a/b/c")
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			return
		}
		if d, ok := p.Match(topic); ok && (d == "" || len(d) > len(topic)) {
			t.Fatalf("bad drone %q for %q", d, topic)
		}
	})
}
