package testkit

import (
	"context"
	"errors"
	"testing"
)

// Run waits for ready, stop ends run's ctx and gives run's error to every
// call.
func TestRun(t *testing.T) {
	ready := make(chan struct{})
	errEnd := errors.New("ended")
	ran := false
	stop := Run(t, func(ctx context.Context) error {
		ran = true
		close(ready)
		<-ctx.Done()
		return errEnd
	}, ready)
	if !ran {
		t.Fatal("Run returned before ready")
	}
	if err := stop(); err != errEnd {
		t.Fatalf("stop: %v", err)
	}
	if err := stop(); err != errEnd {
		t.Fatalf("second stop: %v", err)
	}
}
