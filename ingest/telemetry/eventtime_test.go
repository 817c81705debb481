package telemetry

import (
	"strconv"
	"testing"
	"time"
)

func TestEventTime(t *testing.T) {
	ref := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	s := ref.Unix()
	cases := []struct {
		payload string
		field   string
		unit    TimeUnit
		want    int64
		status  timeStatus
	}{
		{`{"timestamp":` + itoa(s) + `}`, "timestamp", TimeAuto, ref.UnixNano(), timeOK},
		{`{"timestamp":` + itoa(s*1000+123) + `}`, "timestamp", TimeAuto, ref.UnixNano() + 123e6, timeOK},
		{`{"timestamp":` + itoa(s*1e6+5) + `}`, "timestamp", TimeAuto, ref.UnixNano() + 5e3, timeOK},
		{`{"timestamp":` + itoa(ref.UnixNano()+7) + `}`, "timestamp", TimeAuto, ref.UnixNano() + 7, timeOK},
		{`{"timestamp":` + itoa(s) + `.5}`, "timestamp", TimeAuto, ref.UnixNano() + 5e8, timeOK},
		{`{"ts":` + itoa(s) + `}`, "ts", TimeMillis, s * 1e6, timeOK},
		{`{"t":"2026-11-29T15:00:00.25Z"}`, "t", TimeAuto, ref.UnixNano() + 25e7, timeOK},
		{`{"t":"2026-11-29T16:00:00+01:00"}`, "t", TimeNanos, ref.UnixNano(), timeOK},
		{`{"meta":{"ts":` + itoa(s) + `}}`, "meta.ts", TimeAuto, ref.UnixNano(), timeOK},
		{`{"meta":5}`, "meta.ts", TimeAuto, 0, timeMissing},
		{`{"x":1}`, "timestamp", TimeAuto, 0, timeMissing},
		{`[1,2]`, "timestamp", TimeAuto, 0, timeMissing},
		{`{"timestamp":"yesterday"}`, "timestamp", TimeAuto, 0, timeInvalid},
		{`{"timestamp":true}`, "timestamp", TimeAuto, 0, timeInvalid},
		{`{"timestamp":null}`, "timestamp", TimeAuto, 0, timeInvalid},
		{`{"timestamp":-5}`, "timestamp", TimeAuto, 0, timeInvalid},
		{`{"timestamp":1e300}`, "timestamp", TimeAuto, 0, timeInvalid},
		{`{"timestamp":{"a":1}}`, "timestamp", TimeAuto, 0, timeInvalid},
		// Beyond int64 nanoseconds (1677-09-21 to 2262-04-11): invalid, not wrapped.
		{`{"t":"5000-01-01T00:00:00Z"}`, "t", TimeAuto, 0, timeInvalid},
		{`{"t":"2262-04-12T00:00:00Z"}`, "t", TimeAuto, 0, timeInvalid},
		{`{"t":"1500-01-01T00:00:00Z"}`, "t", TimeAuto, 0, timeInvalid},
		{`{"t":"2262-04-11T00:00:00Z"}`, "t", TimeAuto, time.Date(2262, 4, 11, 0, 0, 0, 0, time.UTC).UnixNano(), timeOK},
	}
	for _, c := range cases {
		got, st := eventTime([]byte(c.payload), fieldPath(c.field), c.unit)
		if got != c.want || st != c.status {
			t.Errorf("%s [%s %s]: got %d,%d want %d,%d", c.payload, c.field, c.unit, got, st, c.want, c.status)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func FuzzEventTime(f *testing.F) {
	f.Add([]byte(`{"timestamp":1764428400123}`), "timestamp")
	f.Add([]byte(`{"t":"2026-11-29T15:00:00Z"}`), "t")
	f.Add([]byte(`{"a":{"b":1e18}}`), "a.b")
	f.Fuzz(func(t *testing.T, payload []byte, field string) {
		ns, st := eventTime(payload, fieldPath(field), TimeAuto)
		if st == timeOK && ns <= 0 {
			t.Fatalf("ok with %d", ns)
		}
	})
}

func TestTimeUnitMicroSign(t *testing.T) {
	cfg := testConfig("tcp://127.0.0.1:1", "c")
	cfg.TimeUnit = "µs"
	in, err := New(cfg, Sink{Stream: nilAppender{}, Meta: nilMeta{}})
	if err != nil {
		t.Fatal(err)
	}
	ev := in.buildEvent(newLane("d", 1), "t", []byte(`{"timestamp":5}`), 1)
	if ev.EventTime != 5000 {
		t.Fatalf("µs read as %d ns", ev.EventTime)
	}
	if _, err := ParseTimeUnit("weeks"); err == nil {
		t.Fatal("bad unit accepted")
	}
}
