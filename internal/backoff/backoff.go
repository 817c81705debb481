// Package backoff is the wait between retries of the central tools (the
// reader, read --follow, export, cut --wait): capped exponential, with
// jitter so that many readers retrying against a centre that comes back
// do not retry in step, and cut short when the caller's context ends.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay is the wait after the n-th failure in a row (n ≥ 1): base
// doubled n−1 times, at most most, then a random point in its upper half.
func Delay(base, most time.Duration, n int) time.Duration {
	d := most
	if n >= 1 && n <= 32 && base<<(n-1) > 0 && base<<(n-1) < most {
		d = base << (n - 1)
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits Delay(base, most, n), or until ctx ends (then it returns
// ctx's error).
func Sleep(ctx context.Context, base, most time.Duration, n int) error {
	t := time.NewTimer(Delay(base, most, n))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
