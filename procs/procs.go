package procs

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"time"
)

// Config configures a Controller. The zero value is the default.
type Config struct {
	// Max is the most Ps. Default: GOMAXPROCS when the Controller is made
	// (the CPUs the process may use: Go honours a cgroup CPU limit). It is
	// read once: setting GOMAXPROCS stops the runtime's own updates when
	// that limit changes, so a changed limit takes a restart.
	Max int
	// Min is the fewest Ps. Default 1.
	Min int
	// Interval is how often the load is sampled. Default 100 ms.
	Interval time.Duration
	// Raise is the busy share of the Ps (CPU time / (Ps × Interval)) at
	// or above which one interval raises them. Default 0.75.
	Raise float64
	// Target is the busy share a new count aims at. Default 0.5: the
	// gap to Raise keeps a load at the edge from flapping.
	Target float64
	// Hold is how long the load must have fitted in fewer Ps at Target
	// before they are lowered. Default 5 s.
	Hold time.Duration
	// Logger receives a debug record per change. Default slog.Default().
	Logger *slog.Logger

	// SetProcs sets GOMAXPROCS (n > 0) and returns the previous value
	// (as runtime.GOMAXPROCS, the default; tests that drive a Controller
	// through Observe keep it in a variable).
	SetProcs func(n int) int
}

// NewDefaultConfig returns the defaults noted on each field of Config:
// the one place their numbers are written. Max stays 0: it is read from
// GOMAXPROCS when the Controller is made; SetProcs and Logger stay nil
// (runtime.GOMAXPROCS, slog.Default()).
func NewDefaultConfig() Config {
	return Config{
		Min:      1,
		Interval: 100 * time.Millisecond,
		Raise:    0.75,
		Target:   0.5,
		Hold:     5 * time.Second,
	}
}

// withDefaults fills the unset (or out of range) fields of c from
// NewDefaultConfig.
func (c Config) withDefaults() Config {
	d := NewDefaultConfig()
	if c.SetProcs == nil {
		c.SetProcs = runtime.GOMAXPROCS
	}
	if c.Max <= 0 {
		c.Max = c.SetProcs(0)
	}
	if c.Min <= 0 {
		c.Min = d.Min
	}
	c.Min = min(c.Min, c.Max)
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.Raise <= 0 || c.Raise > 1 {
		c.Raise = d.Raise
	}
	if c.Target <= 0 || c.Target > c.Raise {
		c.Target = min(d.Target, c.Raise)
	}
	if c.Hold <= 0 {
		c.Hold = d.Hold
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Stats is what a Controller did.
type Stats struct {
	// Procs is GOMAXPROCS now; MaxProcs and MinProcs its bounds.
	Procs    int `json:"gomaxprocs"`
	MaxProcs int `json:"max"`
	MinProcs int `json:"min"`
	// Raised and Lowered count the changes.
	Raised  uint64 `json:"raised"`
	Lowered uint64 `json:"lowered"`
	// Busy is the busy share of the Ps over the last interval.
	Busy float64 `json:"busy"`
	// WaitP99 and WaitMax are the 99th percentile and the longest of
	// how long goroutines made runnable in the last interval waited to
	// run (the upper bounds of the runtime's /sched/latencies buckets):
	// for a P, or for the CPU when other processes hold it. Shown, not
	// acted on: waits for the CPU are as long at any count.
	WaitP99 float64 `json:"wait_p99_seconds"`
	WaitMax float64 `json:"wait_max_seconds"`
	// Sized is false when GOMAXPROCS is fixed (runtime.procs or the
	// GOMAXPROCS environment variable) and nothing sizes it.
	Sized bool `json:"sized"`
}

// Controller keeps GOMAXPROCS at what the load needs (see the package
// comment). Run it once.
type Controller struct {
	cfg Config

	mu    sync.Mutex
	stats Stats
	// The load of the intervals within Hold: the Ps each needed at Target.
	need  []sample
	since time.Time // when the count last changed (or Run started)
}

type sample struct {
	at   time.Time
	need int
}

// New returns a Controller; nothing changes until Run.
func New(cfg Config) *Controller {
	cfg = cfg.withDefaults()
	return &Controller{cfg: cfg, stats: Stats{Procs: cfg.SetProcs(0), MaxProcs: cfg.Max, MinProcs: cfg.Min, Sized: true}}
}

// Run samples the load and sets GOMAXPROCS until ctx ends, then gives
// the process Max Ps again. It starts at Min: a load that needs more
// raises it within an Interval.
func (c *Controller) Run(ctx context.Context) error {
	lastCPU, last, lastWaits := processCPU(), time.Now(), schedLatencies()
	defer func() { c.set(time.Now(), c.cfg.Max, "stopped") }()
	c.set(last, c.cfg.Min, "started")
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cpu, now, waits := processCPU(), time.Now(), schedLatencies()
		p99, longest := waited(lastWaits, waits)
		c.Observe(now, Load{Elapsed: now.Sub(last), CPU: cpu - lastCPU, WaitP99: p99, WaitMax: longest})
		lastCPU, last, lastWaits = cpu, now, waits
	}
}

// Load is one interval's load.
type Load struct {
	// Elapsed is the interval's wall time; CPU the CPU time the process
	// used in it, user and system (see processCPU).
	Elapsed, CPU time.Duration
	// WaitP99 and WaitMax are the 99th percentile and the longest of
	// how long the goroutines made runnable in the interval waited to run.
	WaitP99, WaitMax time.Duration
}

// Observe takes the load of the interval ending at now. Run calls it; it
// is exported for tests that drive a Controller with a chosen load.
func (c *Controller) Observe(now time.Time, l Load) {
	if l.Elapsed <= 0 {
		return
	}
	cores := l.CPU.Seconds() / l.Elapsed.Seconds() // the cores the interval used
	c.mu.Lock()
	procs := c.stats.Procs
	busy := cores / float64(procs)
	c.stats.Busy, c.stats.WaitP99, c.stats.WaitMax = busy, l.WaitP99.Seconds(), l.WaitMax.Seconds()
	need := c.clamp(int(math.Ceil(cores / c.cfg.Target)))
	if c.since.IsZero() {
		c.since = now.Add(-l.Elapsed)
	}
	c.need = append(c.need, sample{at: now, need: need})
	drop := 0
	for drop < len(c.need) && now.Sub(c.need[drop].at) > c.cfg.Hold {
		drop++
	}
	c.need = append(c.need[:0], c.need[drop:]...)
	// Lower only to what every interval of the last Hold needed, and
	// only once Hold has passed at this count.
	peak := 0
	for _, s := range c.need {
		peak = max(peak, s.need)
	}
	held := now.Sub(c.since) >= c.cfg.Hold
	c.mu.Unlock()

	switch {
	case busy >= c.cfg.Raise && procs < c.cfg.Max:
		c.set(now, max(need, procs+1), "raised")
	case held && peak < procs:
		c.set(now, peak, "lowered")
	}
}

func (c *Controller) clamp(n int) int { return min(c.cfg.Max, max(c.cfg.Min, n)) }

// set makes GOMAXPROCS n at now; a change restarts the Hold.
func (c *Controller) set(now time.Time, n int, why string) {
	n = c.clamp(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.stats.Procs
	if n == prev && why != "started" {
		return
	}
	c.cfg.SetProcs(n)
	c.stats.Procs = n
	c.need = c.need[:0]
	c.since = now
	switch why {
	case "raised":
		c.stats.Raised++
	case "lowered":
		c.stats.Lowered++
	}
	if n != prev {
		c.cfg.Logger.Debug("procs: GOMAXPROCS", "procs", n, "was", prev, "why", why, "busy", c.stats.Busy)
	}
}

// Stats returns what the Controller did so far.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Fixed is the Stats of a process whose GOMAXPROCS nothing sizes.
func Fixed() Stats {
	n := runtime.GOMAXPROCS(0)
	return Stats{Procs: n, MaxProcs: n, MinProcs: n}
}

// schedLatencies reads /sched/latencies:seconds.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// waited is the 99th percentile and the longest of the waits observed
// between two readings of the cumulative /sched/latencies histogram: the
// upper bounds of their buckets (the lower bound of the open last one);
// 0 with none.
func waited(before, after *metrics.Float64Histogram) (p99, longest time.Duration) {
	if after == nil {
		return 0, 0
	}
	count := func(i int) uint64 {
		n := after.Counts[i]
		if before != nil && i < len(before.Counts) {
			n -= before.Counts[i]
		}
		return n
	}
	bound := func(i int) time.Duration {
		upper := after.Buckets[i+1]
		if math.IsInf(upper, 1) {
			upper = after.Buckets[i]
		}
		return time.Duration(upper * float64(time.Second))
	}
	var total uint64
	for i := range after.Counts {
		if n := count(i); n > 0 {
			total += n
			longest = bound(i)
		}
	}
	rank, seen := uint64(math.Ceil(0.99*float64(total))), uint64(0)
	for i := range after.Counts {
		if seen += count(i); total > 0 && seen >= rank {
			return bound(i), longest
		}
	}
	return 0, 0
}

// processCPU is the process's CPU time (all threads), user and system.
// System time counts because a goroutine in a short system call (a
// pwrite, a socket read or write) holds its P for the whole call: a load
// of them keeps its Ps busy with hardly any user time (TestSyscallLoadGetsItsPs).
// What it overcounts is small: a call that blocks (an msync waiting for the
// disk) gives its P away but spends that wait off the CPU, and the
// wake-ups of idle Ps it would charge are what a busy P has few of.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
