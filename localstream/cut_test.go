package localstream

import (
	"errors"
	"testing"
)

func TestStreamCutTextRoundTrip(t *testing.T) {
	c := StreamCut{Stream: "video", Positions: map[SegmentID]uint64{NewSegmentID(0, 1): 12, NewSegmentID(1, 2): 0, NewSegmentID(1, 3): 7}}
	s := c.String()
	if want := "video:0.1=12,1.2=0,1.3=7"; s != want {
		t.Fatalf("String() = %q, want %q", s, want)
	}
	got, err := ParseStreamCut(s)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(c) {
		t.Fatalf("round trip: %v != %v", got, c)
	}
	b, _ := c.MarshalBinary()
	var back StreamCut
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(c) {
		t.Fatalf("binary round trip: %v != %v", back, c)
	}
}

func TestParseStreamCutErrors(t *testing.T) {
	for _, s := range []string{
		"", "video", "video:", "Video:0.0=1", "video:0.0", "video:0=1", "video:a.0=1", "video:0.0=-1",
		"video:0.0=1,0.0=2", "video:4294967296.0=1", "video:0.0=1,", "1video:0.0=1",
	} {
		if _, err := ParseStreamCut(s); !errors.Is(err, ErrCorruptCut) {
			t.Errorf("ParseStreamCut(%q) = %v, want ErrCorruptCut", s, err)
		}
	}
}

func TestStreamCutBinaryCorrupt(t *testing.T) {
	c := StreamCut{Stream: "telemetry", Positions: map[SegmentID]uint64{0: 5}}
	b, _ := c.MarshalBinary()
	for i := range b {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x40
		var out StreamCut
		if err := out.UnmarshalBinary(bad); !errors.Is(err, ErrCorruptCut) {
			t.Errorf("flip byte %d: err = %v, want ErrCorruptCut", i, err)
		}
	}
	for n := range len(b) {
		var out StreamCut
		if err := out.UnmarshalBinary(b[:n]); !errors.Is(err, ErrCorruptCut) {
			t.Errorf("truncate to %d: err = %v, want ErrCorruptCut", n, err)
		}
	}
}

func FuzzParseStreamCut(f *testing.F) {
	f.Add("video:0.0=12,1.2=0")
	f.Add("telemetry:0.0=0")
	f.Add("x:4294967295.4294967295=18446744073709551615")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseStreamCut(s)
		if err != nil {
			if !errors.Is(err, ErrCorruptCut) {
				t.Fatalf("error not ErrCorruptCut: %v", err)
			}
			return
		}
		back, err := ParseStreamCut(c.String())
		if err != nil || !back.Equal(c) {
			t.Fatalf("re-parse of %q: %v, %v", c.String(), back, err)
		}
	})
}

func FuzzStreamCutBinary(f *testing.F) {
	c := StreamCut{Stream: "video", Positions: map[SegmentID]uint64{NewSegmentID(0, 1): 12, NewSegmentID(1, 2): 0}}
	b, _ := c.MarshalBinary()
	f.Add(b)
	f.Add([]byte{'C', 1, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var c StreamCut
		if err := c.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrCorruptCut) {
				t.Fatalf("error not ErrCorruptCut: %v", err)
			}
			return
		}
		out, _ := c.MarshalBinary()
		var back StreamCut
		if err := back.UnmarshalBinary(out); err != nil || !back.Equal(c) {
			t.Fatalf("re-decode: %v %v", back, err)
		}
	})
}

// TestCutMapRoundTrip: the JSON map form of a cut reads back to the same
// cut; keys that are not canonical decimals are refused.
func TestCutMapRoundTrip(t *testing.T) {
	c := StreamCut{Stream: "video", Positions: map[SegmentID]uint64{NewSegmentID(1, 2): 0, NewSegmentID(0, 0): 3}}
	m := c.Map()
	if m["4294967298"] != 0 || m["0"] != 3 || len(m) != 2 {
		t.Fatalf("Map = %v", m)
	}
	back, err := m.Cut("video")
	if err != nil || !back.Equal(c) {
		t.Fatalf("Cut = %s, %v", back, err)
	}
	if z, err := CutMap(nil).Cut("video"); err != nil || !z.IsZero() || (StreamCut{}).Map() != nil {
		t.Fatalf("nil map: %s, %v", z, err)
	}
	for _, bad := range []CutMap{{"01": 1}, {"x": 1}, {"-1": 2}, {"18446744073709551616": 1}} {
		if _, err := bad.Cut("video"); !errors.Is(err, ErrCorruptCut) {
			t.Fatalf("Cut(%v) = %v, want ErrCorruptCut", bad, err)
		}
	}
}
