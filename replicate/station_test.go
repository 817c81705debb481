package replicate

import (
	"errors"
	"strings"
	"testing"
)

// TestStationFromMachineID: the station identity is a stable hash of the
// machine id (never the id itself), differs between machines, and an
// empty, placeholder or malformed id is refused.
func TestStationFromMachineID(t *testing.T) {
	const a, b = "3d1219c7c4c5404aaa1f6d2a48adfda4\n", "0a1219c7c4c5404aaa1f6d2a48adfda4"
	sa, err := stationFromMachineID(a)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := stationFromMachineID(strings.TrimSpace(a))
	sb, _ := stationFromMachineID(b)
	if sa != again || sa == sb || len(sa) != 32 || strings.Contains(a, sa) {
		t.Fatalf("station %q (again %q, other machine %q)", sa, again, sb)
	}
	for _, bad := range []string{"", "\n", strings.Repeat("0", 32), "xyz", strings.Repeat("a", 31)} {
		if _, err := stationFromMachineID(bad); !errors.Is(err, ErrNoStation) {
			t.Fatalf("machine id %q: %v, want ErrNoStation", bad, err)
		}
	}
	if s, err := MachineStation(); err == nil && len(s) != 32 {
		t.Fatalf("this machine's station %q", s)
	}
}
