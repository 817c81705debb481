package procs

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// driven is a Controller fed a chosen load through Observe, with
// GOMAXPROCS kept in a variable.
type driven struct {
	t     *testing.T
	c     *Controller
	procs int
	now   time.Time
	step  time.Duration
}

func newDriven(t *testing.T, cfg Config) *driven {
	d := &driven{t: t, procs: 1, now: time.Unix(1_800_000_000, 0), step: 100 * time.Millisecond}
	cfg.SetProcs = func(n int) int {
		prev := d.procs
		if n > 0 {
			d.procs = n
		}
		return prev
	}
	cfg.Interval = d.step
	d.c = New(cfg)
	d.c.set(d.now, d.c.cfg.Min, "started")
	return d
}

// load runs intervals of the given cores of Go code for dur.
func (d *driven) load(cores float64, dur time.Duration) {
	for end := d.now.Add(dur); d.now.Before(end); {
		d.now = d.now.Add(d.step)
		d.c.Observe(d.now, Load{Elapsed: d.step, CPU: time.Duration(cores * float64(d.step))})
	}
}

func (d *driven) want(procs int, what string) {
	d.t.Helper()
	if d.procs != procs || d.c.Stats().Procs != procs {
		d.t.Fatalf("%s: GOMAXPROCS %d (stats %d), want %d", what, d.procs, d.c.Stats().Procs, procs)
	}
}

func TestRaisesAtOnceLowersAfterHold(t *testing.T) {
	d := newDriven(t, Config{Max: 8, Hold: 5 * time.Second})
	d.want(1, "start")
	d.load(0.3, 10*time.Second)
	d.want(1, "a third of a core")
	// Saturated at one P: the Ps used all they had; one interval raises
	// them to what the load needs at Target (1 core / 0.5 = 2).
	d.load(1, d.step)
	d.want(2, "one saturated interval")
	// Saturated at two: to four in one interval.
	d.load(2, d.step)
	d.want(4, "saturated at two")
	// The load falls: nothing moves before Hold, then down to what the
	// busiest interval of the Hold needs.
	d.load(0.9, 4900*time.Millisecond)
	d.want(4, "before Hold")
	d.load(0.9, 200*time.Millisecond)
	d.want(2, "after Hold (0.9 cores need 2 at 0.5)")
	d.load(0.2, 5100*time.Millisecond)
	d.want(1, "idle")
	if s := d.c.Stats(); s.Raised != 2 || s.Lowered != 2 {
		t.Fatalf("stats %+v, want 2 raised and 2 lowered", s)
	}
}

// A load between Target and Raise stays where it is: no flapping.
func TestLoadAtTheEdgeStays(t *testing.T) {
	d := newDriven(t, Config{Max: 2})
	d.load(0.7, 20*time.Second) // busy 0.7 at one P: below Raise
	d.want(1, "0.7 cores at one P")
	d.load(0.8, d.step)
	d.want(2, "0.8 cores")
	// At two Ps 0.7 cores is a busy share of 0.35, but it needs two at
	// Target: it stays at two.
	d.load(0.7, 20*time.Second)
	d.want(2, "0.7 cores at two Ps")
	// One spike within the Hold keeps the count.
	d.load(0.4, 4*time.Second)
	d.load(0.9, d.step)
	d.load(0.4, 4*time.Second)
	d.want(2, "a spike within the Hold")
	d.load(0.4, 2*time.Second)
	d.want(1, "the Hold passed without a spike")
	if s := d.c.Stats(); s.Raised != 1 || s.Lowered != 1 {
		t.Fatalf("stats %+v, want one change each way", s)
	}
}

// Waits are shown, not acted on (see the package comment).
func TestWaitsShown(t *testing.T) {
	d := newDriven(t, Config{Max: 2})
	d.now = d.now.Add(d.step)
	d.c.Observe(d.now, Load{Elapsed: d.step, CPU: d.step / 5, WaitP99: 6 * time.Millisecond, WaitMax: 9 * time.Millisecond})
	d.want(1, "long waits at a fifth of a core")
	if s := d.c.Stats(); s.WaitP99 != 0.006 || s.WaitMax != 0.009 || math.Abs(s.Busy-0.2) > 1e-9 {
		t.Fatalf("stats %+v", s)
	}
}

func TestWaited(t *testing.T) {
	h := func(counts ...uint64) *metrics.Float64Histogram {
		return &metrics.Float64Histogram{Counts: counts, Buckets: []float64{0, 0.001, 0.002, 0.004, math.Inf(1)}}
	}
	// This interval: 98 under 1 ms, 1 under 2, 1 under 4.
	if p99, longest := waited(h(10, 0, 0, 0), h(108, 1, 1, 0)); p99 != 2*time.Millisecond || longest != 4*time.Millisecond {
		t.Errorf("p99 %v, longest %v: want 2ms and 4ms", p99, longest)
	}
	// 99 under 1 ms, 1 under 4: the 99th is in the first bucket.
	if p99, longest := waited(nil, h(99, 0, 1, 0)); p99 != time.Millisecond || longest != 4*time.Millisecond {
		t.Errorf("p99 %v, longest %v: want 1ms and 4ms", p99, longest)
	}
	if p99, longest := waited(h(10, 1, 1, 0), h(10, 1, 1, 0)); p99 != 0 || longest != 0 {
		t.Errorf("nothing observed: %v %v, want 0", p99, longest)
	}
	if p99, longest := waited(h(10, 0, 0, 0), h(10, 0, 0, 5)); p99 != 4*time.Millisecond || longest != 4*time.Millisecond {
		t.Errorf("the open last bucket: %v %v, want its lower bound 4ms", p99, longest)
	}
}

func TestBounds(t *testing.T) {
	d := newDriven(t, Config{Max: 1})
	d.load(1, time.Second)
	d.want(1, "Max 1")
	d = newDriven(t, Config{Max: 4, Min: 2})
	d.want(2, "Min 2")
	d.load(0.1, 10*time.Second)
	d.want(2, "idle at Min 2")
	d.load(8, d.step) // more than Max can give
	d.want(4, "Max 4")
}

// TestRunAdjustsTheRuntime runs a Controller on the real runtime and the
// process's real CPU time: idle it keeps one P, two goroutines spinning
// raise it to two, and once they stop it is back at one; when it stops it
// leaves Max.
func TestRunAdjustsTheRuntime(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	c := New(Config{Max: 2, Interval: 20 * time.Millisecond, Hold: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor := func(procs int, what string) {
		t.Helper()
		if !testkit.Until(10*time.Second, func() bool { return runtime.GOMAXPROCS(0) == procs }) {
			t.Fatalf("%s: GOMAXPROCS %d after 10 s, want %d (stats %+v)", what, runtime.GOMAXPROCS(0), procs, c.Stats())
		}
	}
	waitFor(1, "started")
	// A window of idle Holds, not a wait: nothing happens in it that could
	// be waited on — the check is that the controller does not raise.
	time.Sleep(500 * time.Millisecond)
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("idle: GOMAXPROCS %d, want 1 (stats %+v)", n, c.Stats())
	}

	var stop atomic.Bool
	var spinning sync.WaitGroup
	var spins atomic.Int64
	for range 2 {
		spinning.Go(func() {
			for n := 0; !stop.Load(); n++ {
				if n%1024 == 0 {
					spins.Add(1)
				}
			}
		})
	}
	waitFor(2, "two goroutines spinning")
	stop.Store(true)
	spinning.Wait()
	if spins.Load() == 0 {
		t.Fatal("the goroutines did not spin")
	}
	waitFor(1, "spinning stopped")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := runtime.GOMAXPROCS(0); n != 2 {
		t.Fatalf("after Run: GOMAXPROCS %d, want Max 2", n)
	}
	if s := c.Stats(); s.Raised == 0 || s.Lowered == 0 {
		t.Fatalf("stats %+v: want a raise and a lowering", s)
	}
}
