package telemetry

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDroneID(t *testing.T) {
	for _, c := range []struct {
		level  string
		keep   bool
		prefix string
	}{
		{"d1", true, "d1"},
		{"drone 7", true, "drone 7"},
		{"a.b*c>%", true, "a.b*c>%"},
		{"дрон-1", true, "дрон-1"},
		{strings.Repeat("x", MaxDroneIDBytes), true, ""},
		{strings.Repeat("x", MaxDroneIDBytes+1), false, strings.Repeat("x", mappedPrefixBytes) + "~"},
		{strings.Repeat("é", 150), false, strings.Repeat("é", mappedPrefixBytes/2) + "~"},
		{"tab\there", false, "tab_here~"},
		{"bad\xffutf8", false, "bad_utf8~"},
		{strings.Repeat("y", 5000), false, strings.Repeat("y", mappedPrefixBytes) + "~"},
	} {
		id, mapped := DroneID(c.level)
		if mapped == c.keep || (c.keep && id != c.level) || !strings.HasPrefix(id, c.prefix) {
			t.Errorf("%.20q: got %q mapped=%v", c.level, id, mapped)
		}
		if again, _ := DroneID(c.level); again != id {
			t.Errorf("%.20q: not deterministic", c.level)
		}
		if !validDroneID(id) {
			t.Errorf("%.20q: mapped to invalid id %q", c.level, id)
		}
	}
	a, _ := DroneID(strings.Repeat("z", 200) + "a")
	b, _ := DroneID(strings.Repeat("z", 200) + "b")
	if a == b {
		t.Fatal("two long ids with one prefix map to one id")
	}
}

// FuzzDroneID: every topic level maps to a valid, bounded id, the same
// every time; a valid id is kept.
func FuzzDroneID(f *testing.F) {
	f.Add("d1")
	f.Add(strings.Repeat("é", 150))
	f.Add("x\x00y\xff")
	f.Fuzz(func(t *testing.T, level string) {
		id, mapped := DroneID(level)
		if !validDroneID(id) || len(id) > MaxDroneIDBytes || !utf8.ValidString(id) {
			t.Fatalf("%q -> invalid %q", level, id)
		}
		if !mapped && id != level {
			t.Fatalf("%q changed to %q without mapping", level, id)
		}
		if again, m2 := DroneID(level); again != id || m2 != mapped {
			t.Fatal("not deterministic")
		}
	})
}
