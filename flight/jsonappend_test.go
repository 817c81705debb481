package flight

import (
	"encoding/json"
	"math"
	"testing"
)

// TestEntryJSON: an entry appended by hand is json.Marshal's bytes, with
// every optional field set or not and strings that encoding/json escapes.
func TestEntryJSON(t *testing.T) {
	strs := []string{"", "telemetry", "drone-1.a_b", `q"uote\back`, "<html>&", "tab\tnl\n\x00", "ünïcode", "bad\xffutf8", "\u2028sep"}
	for i, s := range strs {
		for _, full := range []bool{false, true} {
			e := Entry{N: uint32(i + 1), Stream: s, Agent: "gs-" + s, Seq: 1 << 40, Txn: uint64(i), Position: "3.1@" + s, Key: s,
				EventTimeNs: -5, IngestTimeNs: math.MaxInt64, Topic: "/video/" + s, Messages: i, PayloadSHA256: "ab" + s}
			if full {
				e.Writer, e.Flags, e.ContentType, e.Dropped = s+"w", 0xffff, "video/"+s, "too large"+s
			}
			want, err := json.Marshal(&e)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.appendJSON(nil); string(got) != string(want) {
				t.Fatalf("%q\n got %s\nwant %s", s, got, want)
			}
		}
	}
}

// TestLocationFixJSON: a position appended by hand is what json.Marshal
// writes of foxglove.LocationFix, floats included (exponents at the
// edges encoding/json switches at); NaN is an error, as it is there.
func TestLocationFixJSON(t *testing.T) {
	type stamp struct {
		Sec  int64 `json:"sec"`
		Nsec int64 `json:"nsec"`
	}
	type locationFix struct {
		Timestamp          stamp      `json:"timestamp"`
		FrameID            string     `json:"frame_id"`
		Latitude           float64    `json:"latitude"`
		Longitude          float64    `json:"longitude"`
		Altitude           float64    `json:"altitude"`
		PositionCovariance [9]float64 `json:"position_covariance"`
		CovarianceType     int        `json:"position_covariance_type"`
	}
	floats := []float64{0, 47.3977419, -8.5455938, 488.09, 1e-7, -1e-6, 9.99e-7, 1e20, 1e21, -1.5e300, 5e-324, math.SmallestNonzeroFloat64, 123456789.125}
	for i, f := range floats {
		ns := int64(1_796_614_874_998_039_622) + int64(i)
		want, err := json.Marshal(locationFix{Timestamp: stamp{ns / 1e9, ns % 1e9}, FrameID: "d<1>", Latitude: f, Longitude: -f, Altitude: f / 3})
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendLocationFix(nil, ns, "d<1>", f, -f, f/3)
		if err != nil || string(got) != string(want) {
			t.Fatalf("%v\n got %s (%v)\nwant %s", f, got, err, want)
		}
	}
	if _, err := appendLocationFix(nil, 1, "d", math.NaN(), 0, 0); err == nil {
		t.Fatal("NaN appended")
	}
}
