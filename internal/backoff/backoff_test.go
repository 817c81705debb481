package backoff

import (
	"context"
	"testing"
	"time"
)

// TestDelay: each wait lies in the upper half of base doubled per failure,
// capped at most, and the waits of one step are spread (jitter).
func TestDelay(t *testing.T) {
	base, most := 100*time.Millisecond, 2*time.Second
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond,
		5: 1600 * time.Millisecond, 6: most, 40: most, 1 << 20: most, 0: most} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Delay(base, most, n)
			if d < want/2 || d > want {
				t.Fatalf("failure %d: wait %v outside [%v, %v]", n, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Fatalf("failure %d: %d distinct waits of 200: no jitter", n, len(seen))
		}
	}
}

// TestSleepEndsWithContext: a cancelled context ends the wait at once
// with its error.
func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour, time.Hour, 1); err != context.Canceled || time.Since(start) > time.Second {
		t.Fatalf("Sleep on a cancelled context: %v after %v", err, time.Since(start))
	}
	if err := Sleep(context.Background(), time.Millisecond, time.Millisecond, 1); err != nil {
		t.Fatal(err)
	}
}
