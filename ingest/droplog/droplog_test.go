package droplog

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunBounded: the first change is reported within a second, changes
// then at most once per Interval with the difference since the last
// report, nothing while the counts stand still, and what is unreported at
// stop in a last report.
func TestRunBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Uint64
		type report struct {
			at        time.Duration
			now, last uint64
		}
		var got []report
		start := time.Now()
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(stop, n.Load, func(now, last uint64) { got = append(got, report{time.Since(start), now, last}) })
		}()
		n.Store(1)
		time.Sleep(1500 * time.Millisecond) // reported at 1 s
		for range 5 {                       // a change every second: one report at 11 s
			n.Add(1)
			time.Sleep(time.Second)
		}
		time.Sleep(10 * time.Second) // 6 at 11 s; nothing new after
		n.Add(1)
		time.Sleep(500 * time.Millisecond)
		close(stop) // at 17 s: 7 reported at stop, before the interval
		<-done
		want := []report{{1 * time.Second, 1, 0}, {11 * time.Second, 6, 1}, {17 * time.Second, 7, 6}}
		if len(got) != len(want) {
			t.Fatalf("reports %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("reports %v, want %v", got, want)
			}
		}
	})
}
