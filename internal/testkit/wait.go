package testkit

import (
	"testing"
	"time"
)

// WaitFor polls cond every 5 ms until it holds; once d has passed it fails
// t, naming what it waited for.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Until polls cond every 5 ms until it holds or d has passed, and reports
// whether it held: for a test whose failure message shows the state it
// last saw, or that goes on to assert on that state itself.
func Until(d time.Duration, cond func() bool) bool {
	return UntilEvery(d, 5*time.Millisecond, cond)
}

// UntilEvery is Until polling every period: for a condition that costs
// work to check (a status page of a whole agent, a read at the centre),
// polled no faster than the test needs.
func UntilEvery(d, period time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(period)
	}
	return true
}
