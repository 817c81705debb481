package testkit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// errStuck is what stop gives when run did not return.
var errStuck = errors.New("testkit: did not return within 30s of its ctx ending")

// Run runs run(ctx) on its own goroutine, as a long-lived component's Run
// is run, and waits for ready to close (nil: no wait); run ending first
// fails t with its error. stop cancels ctx, waits for run to return and
// gives its error, the same to every call; the test's end stops it too.
// A run still going 30 s after its ctx ended fails t (Errorf): one way to
// stop, and it is bounded.
func Run(t testing.TB, run func(context.Context) error, ready <-chan struct{}) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errStuck
				t.Errorf("%v", errStuck)
			}
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	if ready != nil {
		select {
		case <-ready:
		case err := <-done:
			once.Do(func() { cancel(); runErr = err })
			t.Fatalf("run ended before it was ready: %v", err)
		}
	}
	return stop
}
