package agent

import (
	"testing"
	"time"
)

// The history keeps the last historyLen samples, oldest first, with the
// columns of every stream as long as the time column (nulls where a stream
// had no sample).
func TestHistoryBounded(t *testing.T) {
	var h history
	t0 := time.Unix(1_800_000_000, 0)
	v := func(f float64) *float64 { return &f }
	for i := range historyLen + 150 {
		row := map[string]streamSample{"telemetry": {backlogEvents: v(float64(i))}}
		if i >= historyLen+100 {
			row["video"] = streamSample{committedLag: v(1)}
		}
		h.add(t0.Add(time.Duration(i)*time.Second), row)
	}
	d := h.doc()
	if len(d.Time) != historyLen {
		t.Fatalf("%d samples kept, want %d", len(d.Time), historyLen)
	}
	if d.Time[0] != float64(t0.Unix()+150) || d.Time[historyLen-1] != float64(t0.Unix()+historyLen+149) {
		t.Fatalf("times %v … %v", d.Time[0], d.Time[historyLen-1])
	}
	tm, vd := d.Streams["telemetry"], d.Streams["video"]
	if len(tm.BacklogEvents) != historyLen || len(vd.CommittedLagSeconds) != historyLen || len(vd.ReplicatedBytes) != historyLen {
		t.Fatalf("column lengths %d %d", len(tm.BacklogEvents), len(vd.CommittedLagSeconds))
	}
	if *tm.BacklogEvents[0] != 150 || *tm.BacklogEvents[historyLen-1] != historyLen+149 {
		t.Fatalf("backlog column %v … %v", *tm.BacklogEvents[0], *tm.BacklogEvents[historyLen-1])
	}
	// video appeared 50 samples before the end.
	if vd.CommittedLagSeconds[historyLen-51] != nil || vd.CommittedLagSeconds[historyLen-50] == nil {
		t.Fatal("video column not aligned with time")
	}
}
