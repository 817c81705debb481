package procs

import (
	"context"
	"crypto/sha256"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pipeline passes messages through four goroutines on channels (the
// agent's shape: connection, drone lane, committer, completer); each stage
// hashes the message work times. burst messages are sent every period
// (period 0: flat out) for dur. It returns the messages done and the
// process's user+system CPU time meanwhile.
func pipeline(burst int, period, dur time.Duration, work int) (msgs int, cpu time.Duration) {
	const stages = 4
	chans := make([]chan []byte, stages+1)
	for i := range chans {
		chans[i] = make(chan []byte, 1024)
	}
	for i := range stages {
		go func() {
			for m := range chans[i] {
				for range work {
					sum := sha256.Sum256(m)
					m[0] ^= sum[0]
				}
				chans[i+1] <- m
			}
			close(chans[i+1])
		}()
	}
	done := make(chan int)
	go func() {
		n := 0
		for range chans[stages] {
			n++
		}
		done <- n
	}()
	before := processCPU()
	end := time.Now().Add(dur)
	next := time.Now()
	if burst == 0 {
		burst = 64
	}
	for time.Now().Before(end) {
		for range burst {
			chans[0] <- make([]byte, 200)
		}
		if period > 0 {
			next = next.Add(period)
			time.Sleep(time.Until(next))
		}
	}
	close(chans[0])
	msgs = <-done
	return msgs, processCPU() - before
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProcs runs the pipeline with GOMAXPROCS fixed at the CPUs
// (fixed) and sized by a Controller (sized), alternating, one second each:
// paced at a load well under one core (CPU per message: what the sizing
// saves) and flat out (messages per second: what it must not cost).
//
//	go test -run '^$' -bench BenchmarkProcs -benchtime 3x ./procs/
func BenchmarkProcs(b *testing.B) {
	maxProcs := runtime.GOMAXPROCS(0)
	if maxProcs < 2 {
		b.Skip("one CPU: nothing to size")
	}
	defer runtime.GOMAXPROCS(maxProcs)
	type result struct{ msgs, cpu, procs float64 }
	run := func(sized bool, burst int, period time.Duration, work int) result {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		if sized {
			c := New(Config{Max: maxProcs})
			go func() { done <- c.Run(ctx) }()
		} else {
			runtime.GOMAXPROCS(maxProcs)
			done <- nil
		}
		n, cpu := pipeline(burst, period, time.Second, work)
		procs := runtime.GOMAXPROCS(0)
		cancel()
		<-done
		return result{float64(n), cpu.Seconds(), float64(procs)}
	}
	for _, load := range []struct {
		name   string
		burst  int
		period time.Duration
		work   int
	}{
		{"paced-30k-per-s", 30, time.Millisecond, 1},
		{"flat-out", 0, 0, 8},
	} {
		b.Run(load.name, func(b *testing.B) {
			var fixed, sized result
			for i := range b.N {
				for _, s := range []bool{i%2 == 0, i%2 != 0} {
					r := run(s, load.burst, load.period, load.work)
					if s {
						sized.msgs, sized.cpu, sized.procs = sized.msgs+r.msgs, sized.cpu+r.cpu, sized.procs+r.procs
					} else {
						fixed.msgs, fixed.cpu = fixed.msgs+r.msgs, fixed.cpu+r.cpu
					}
				}
			}
			b.ReportMetric(fixed.cpu/fixed.msgs*1e6, "fixed_cpu_us/msg")
			b.ReportMetric(sized.cpu/sized.msgs*1e6, "sized_cpu_us/msg")
			b.ReportMetric((sized.cpu/sized.msgs)/(fixed.cpu/fixed.msgs), "sized/fixed_cpu")
			b.ReportMetric(fixed.msgs/float64(b.N), "fixed_msgs/s")
			b.ReportMetric(sized.msgs/float64(b.N), "sized_msgs/s")
			b.ReportMetric(sized.msgs/fixed.msgs, "sized/fixed_msgs")
			b.ReportMetric(sized.procs/float64(b.N), "sized_procs_at_end")
		})
	}
}
