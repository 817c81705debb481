package procs

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pipeline passes messages through four goroutines on channels (the
// agent's shape: connection, drone lane, committer, completer); each stage
// does work on every message. burst messages are sent every period
// (period 0: flat out) for dur. It returns the messages done and the
// process's user+system CPU time meanwhile.
func pipeline(burst int, period, dur time.Duration, work func(stage int, m []byte)) (msgs int, cpu time.Duration) {
	const stages = 4
	chans := make([]chan []byte, stages+1)
	for i := range chans {
		chans[i] = make(chan []byte, 1024)
	}
	for i := range stages {
		go func() {
			for m := range chans[i] {
				work(i, m)
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
			time.Sleep(time.Until(next)) // paces the offered load: the benchmark's intent
		}
	}
	close(chans[0])
	msgs = <-done
	return msgs, processCPU() - before
}

// hashes is stage work of Go code: n SHA-256 sums of the message.
func hashes(n int) func(int, []byte) {
	return func(_ int, m []byte) {
		for range n {
			sum := sha256.Sum256(m)
			m[0] ^= sum[0]
		}
	}
}

// pwrites is stage work of short system calls: n pwrites of the message
// to the stage's own file in dir (a page cache copy each), as the
// agent's socket reads and writes and its WAL writes are.
func pwrites(b *testing.B, dir string, n int) func(int, []byte) {
	fds := make([]int, 4)
	for i := range fds {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint("stage-", i)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		fds[i] = int(f.Fd())
	}
	return func(stage int, m []byte) {
		for range n {
			syscall.Pwrite(fds[stage], m, 0)
		}
	}
}

// BenchmarkProcs runs the pipeline with GOMAXPROCS fixed at the CPUs
// (fixed) and sized by a Controller (sized), alternating, one second each:
// paced at a load well under one core (CPU per message: what the sizing
// saves) and flat out (messages per second: what it must not cost), the
// flat-out work Go code (hashing) or system calls (pwrites, issue 29).
//
//	go test -run '^$' -bench BenchmarkProcs -benchtime 3x ./procs/
func BenchmarkProcs(b *testing.B) {
	maxProcs := runtime.GOMAXPROCS(0)
	if maxProcs < 2 {
		b.Skip("one CPU: nothing to size")
	}
	defer runtime.GOMAXPROCS(maxProcs)
	type result struct{ msgs, cpu, procs float64 }
	run := func(sized bool, burst int, period time.Duration, work func(int, []byte)) result {
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
		work   func(int, []byte)
	}{
		{"paced-30k-per-s", 30, time.Millisecond, hashes(1)},
		{"flat-out", 0, 0, hashes(8)},
		{"flat-out-syscalls", 0, 0, pwrites(b, b.TempDir(), 4)},
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
