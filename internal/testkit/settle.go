package testkit

import "time"

// Settle waits until value has not changed for quiet (true), or until
// within has passed (false): the tail of a stream that has no end marker
// has arrived. Under load it waits as long as the value still moves,
// where a fixed sleep would cut the tail off.
func Settle(quiet, within time.Duration, value func() uint64) bool {
	deadline := time.Now().Add(within)
	last, since := value(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(min(quiet/4, 50*time.Millisecond))
		if v := value(); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= quiet {
			return true
		}
	}
	return false
}
