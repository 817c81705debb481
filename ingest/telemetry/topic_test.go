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

func TestPatternInvalid(t *testing.T) {
	for _, s := range []string{"", "drones/+/x", "a/{drone}/{drone}", "a/#/{drone}", "a/x{drone}", "a/b#/{drone}"} {
		if _, err := ParsePattern(s); !errors.Is(err, ErrPattern) {
			t.Errorf("%q: err %v", s, err)
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
