package procs

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// syscallLoad runs n goroutines that each overwrite the first 4 KiB of
// their own file in dir until stop is set: short system calls (a page
// cache copy each) that hold their P for the whole call, almost no Go
// code. It returns the writes done.
func syscallLoad(t testing.TB, dir string, n int, stop *atomic.Bool) (wait func() int64) {
	var writes atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		f, err := os.Create(filepath.Join(dir, "load-"+string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		// The raw system call: os.File's own bookkeeping would be Go
		// code enough to raise the Ps by itself.
		fd, buf := int(f.Fd()), make([]byte, 4096)
		wg.Go(func() {
			defer f.Close()
			for !stop.Load() {
				if _, err := syscall.Pwrite(fd, buf, 0); err != nil {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		})
	}
	return func() int64 { wg.Wait(); return writes.Load() }
}

// TestSyscallLoadGetsItsPs: two goroutines doing nothing but short
// system calls keep one P fully busy (a goroutine in a short system call
// holds its P), so a Controller must give them a second one: it counts
// the system time the process used, not only its user time.
func TestSyscallLoadGetsItsPs(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	c := New(Config{Max: 2, Interval: 20 * time.Millisecond, Hold: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}()
	if !testkit.Until(10*time.Second, func() bool { return runtime.GOMAXPROCS(0) == 1 }) {
		t.Fatalf("idle: GOMAXPROCS %d after 10 s, want 1", runtime.GOMAXPROCS(0))
	}

	var stop atomic.Bool
	wait := syscallLoad(t, t.TempDir(), 2, &stop)
	start := time.Now()
	testkit.Until(10*time.Second, func() bool { return runtime.GOMAXPROCS(0) == 2 }) // asserted below, after the load's own check
	procs, stats := runtime.GOMAXPROCS(0), c.Stats()
	t.Logf("after %v: GOMAXPROCS %d, stats %+v", time.Since(start), procs, stats)
	stop.Store(true)
	writes := wait()
	if writes < 1000 {
		t.Fatalf("the load did %d writes: it did not run", writes)
	}
	if procs != 2 {
		t.Fatalf("two goroutines in system calls (%d writes): GOMAXPROCS %d after 10 s, want 2 (stats %+v)", writes, procs, stats)
	}
}
