// Package droplog is the intakes' bounded report of what they drop,
// refuse or map: the first change is logged within a second, then at most
// one line per Interval with the counts since the last line — never a line
// per packet or message — and a last line at stop for what is unreported.
package droplog

import "time"

// Interval is the least time between two reports.
const Interval = 10 * time.Second

// Run polls read every second until stop is closed and calls report with
// the counts now and at the last report whenever they changed, bounded as
// above. It returns after the last report.
func Run[C comparable](stop <-chan struct{}, read func() C, report func(now, last C)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last C
	var lastLog time.Time
	for done := false; !done; {
		select {
		case <-t.C:
		case <-stop:
			done = true
		}
		now := read()
		if now == last || (!done && time.Since(lastLog) < Interval) {
			continue
		}
		report(now, last)
		last, lastLog = now, time.Now()
	}
}
