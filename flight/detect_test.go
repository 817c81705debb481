package flight

import (
	"testing"
	"time"
)

func TestDetector(t *testing.T) {
	s := int64(time.Second)
	obs := func(d *detector, seq ...any) {
		for i := 0; i < len(seq); i += 2 {
			d.observe(observation{atNs: int64(seq[i].(int)) * s, airborne: seq[i+1].(bool)})
		}
	}
	t.Run("arm to disarm", func(t *testing.T) {
		d := newDetector("mavlink-armed", 0)
		obs(d, 1, false, 2, false, 3, true, 4, true, 9, true, 10, false, 11, false, 12, true, 13, true)
		got := d.flights()
		if len(got) != 2 {
			t.Fatalf("flights %+v", got)
		}
		// The arm happened between 2 and 3, the disarm between 9 and 10.
		if f := got[0]; f.StartNs != 2*s || f.StartUncertaintyNs != s || f.EndNs != 10*s || f.EndUncertaintyNs != s || f.Open {
			t.Fatalf("first flight %+v", f)
		}
		if f := got[1]; f.StartNs != 11*s || f.EndNs != 13*s || !f.Open {
			t.Fatalf("second flight (still in the air) %+v", f)
		}
	})
	t.Run("armed from the first observation", func(t *testing.T) {
		d := newDetector("mavlink-armed", 0)
		obs(d, 5, true, 6, true, 7, false)
		if f := d.flights(); len(f) != 1 || f[0].StartNs != 5*s || f[0].StartUncertaintyNs != 0 || f[0].EndNs != 7*s {
			t.Fatalf("%+v", f)
		}
	})
	t.Run("silence", func(t *testing.T) {
		d := newDetector("silence:30s", 30*time.Second)
		obs(d, 0, true, 10, true, 39, true, 80, true, 81, true)
		got := d.flights()
		if len(got) != 2 || got[0].StartNs != 0 || got[0].EndNs != 39*s || got[0].Open || got[1].StartNs != 80*s || !got[1].Open {
			t.Fatalf("%+v", got)
		}
	})
}

func TestJSONAirborne(t *testing.T) {
	for _, tc := range []struct {
		payload, path string
		air, ok       bool
	}{
		{`{"armed":true}`, "armed", true, true},
		{`{"armed":false}`, "armed", false, true},
		{`{"status":{"in_air":1}}`, "status.in_air", true, true},
		{`{"status":{"in_air":0}}`, "status.in_air", false, true},
		{`{"state":"landed"}`, "state", false, true},
		{`{"state":"flying"}`, "state", true, true},
		{`{"state":"flying"}`, "other", false, false},
		{`{"status":5}`, "status.in_air", false, false},
		{`not json`, "armed", false, false},
		{`{"armed":null}`, "armed", false, false},
	} {
		air, ok := jsonAirborne([]byte(tc.payload), tc.path)
		if air != tc.air || ok != tc.ok {
			t.Errorf("%s %s = %v %v, want %v %v", tc.payload, tc.path, air, ok, tc.air, tc.ok)
		}
	}
}

// FuzzJSONAirborne: any payload and path give an answer, never a panic.
func FuzzJSONAirborne(f *testing.F) {
	f.Add([]byte(`{"status":{"armed":true}}`), "status.armed")
	f.Add([]byte(`[1,2]`), "a.b.c")
	f.Fuzz(func(t *testing.T, payload []byte, path string) {
		jsonAirborne(payload, path)
	})
}
