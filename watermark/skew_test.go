package watermark

import (
	"context"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// TestSkewMeasuredCase is issue 14's measured case: drone A's clock is one
// hour ahead and it is alone for 3 s, then drone B with a correct clock
// joins. B's events must not be late, and no watermark may be ahead of the
// receiving clock plus the allowed skew.
func TestSkewMeasuredCase(t *testing.T) {
	ctx := context.Background()
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	tr, err := NewTracker(st, s, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	const skew = 10 * time.Second
	late := map[string]int{}
	step := func(writer, key string, offset time.Duration) {
		now := clk.Now()
		et := now.Add(offset).UnixNano()
		adm := tr.Admit(writer, et, now.UnixNano())
		ev := localstream.Event{RoutingKey: key, Writer: writer, EventTime: et, IngestTime: now.UnixNano(), Flags: adm.Flags(), Payload: []byte("x")}
		pos, err := st.Append(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.NoteAdmitted(writer, adm, et, pos); err != nil {
			t.Fatal(err)
		}
		if adm.Late {
			late[writer]++
		}
		if want := offset > skew; (adm.Skew == SkewAhead) != want {
			t.Fatalf("%s at %s: skew %s", writer, time.Duration(et-now.UnixNano()), adm.Skew)
		}
		w, err := tr.Local()
		if err != nil {
			t.Fatal(err)
		}
		if limit := now.Add(skew).UnixNano(); w.LowerNs > limit || w.UpperNs > limit {
			t.Errorf("at %s: local watermark %s ahead of the receiving clock + %s", now.Format(time.RFC3339), w, skew)
		}
		clk.Add(100 * time.Millisecond)
	}
	for range 30 { // A alone for 3 s
		step("telemetry/a", "a", time.Hour)
	}
	for range 30 { // then B joins
		step("telemetry/a", "a", time.Hour)
		step("telemetry/b", "b", 0)
	}
	if late["telemetry/b"] != 0 {
		t.Errorf("%d of B's 30 events late", late["telemetry/b"])
	}
	if st := tr.Stats(); st.ClockSkewAhead != 60 || st.Late != 0 {
		t.Errorf("stats %+v, want 60 events ahead, none late", st)
	}
}
