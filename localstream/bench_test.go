package localstream

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BenchmarkDurableAppend measures durable (fsync'd) appends side by side
// with raw Badger doing the same writes with the same durability in the
// same run, two ways: each writer goroutine doing one synced transaction
// per event (raw), and Badger's own batched path — one WriteBatch of all
// the events with sync writes, flushed once (batched: no event is
// acknowledged before the end, so it is the limit to approach, not a way
// to ack appends). Metrics: store-ev/s, raw-ev/s, batched-ev/s, ratio =
// store / raw, ratio-batched = store / batched.
func BenchmarkDurableAppend(b *testing.B) {
	for _, size := range []int{200, 1200, 256 << 10} {
		for _, writers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("size=%d/writers=%d", size, writers), func(b *testing.B) {
				payload := make([]byte, size)
				for i := range payload {
					payload[i] = byte(i * 7)
				}
				raw := benchRaw(b, b.N, writers, payload)
				batched, batchedCPU := benchBatched(b, b.N, payload)
				nowin, nowinCPU, nowinCommits := benchStore(b, b.N, writers, payload, Options{GroupCommitWindow: -1})
				store, storeCPU, commits := benchStore(b, b.N, writers, payload, Options{})
				b.ReportMetric(float64(b.N)/store.Seconds(), "store-ev/s")
				b.ReportMetric(float64(b.N)/raw.Seconds(), "raw-ev/s")
				b.ReportMetric(raw.Seconds()/store.Seconds(), "ratio")
				b.ReportMetric(float64(b.N)/batched.Seconds(), "batched-ev/s")
				b.ReportMetric(batched.Seconds()/store.Seconds(), "ratio-batched")
				b.ReportMetric(float64(b.N*size)/store.Seconds()/1e6, "store-MB/s")
				b.ReportMetric(float64(commits)/float64(b.N), "syncs/ev")
				b.ReportMetric(float64(storeCPU.Microseconds())/float64(b.N), "cpu-us/ev")
				b.ReportMetric(float64(batchedCPU.Microseconds())/float64(b.N), "batched-cpu-us/ev")
				b.ReportMetric(float64(b.N)/nowin.Seconds(), "nowindow-ev/s")
				b.ReportMetric(float64(nowinCommits)/float64(b.N), "nowindow-syncs/ev")
				b.ReportMetric(float64(nowinCPU.Microseconds())/float64(b.N), "nowindow-cpu-us/ev")
				b.SetBytes(int64(size))
			})
		}
	}
}

// spread runs n jobs over w goroutines and returns the elapsed time.
func spread(n, w int, job func(i int)) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range w {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				job(int(i))
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// openRaw opens a bare Badger with the store's options and sync writes.
func openRaw(b *testing.B) *badger.DB {
	opts := Options{}.withDefaults()
	db, err := badger.Open(badger.DefaultOptions(b.TempDir()).WithSyncWrites(true).
		WithValueThreshold(opts.ValueThreshold).WithMemTableSize(opts.MemTableSize).
		WithNumVersionsToKeep(1).WithDetectConflicts(false).WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	return db
}

func benchRaw(b *testing.B, n, writers int, payload []byte) time.Duration {
	b.StopTimer()
	db := openRaw(b)
	defer db.Close()
	b.StartTimer()
	d := spread(n, writers, func(i int) {
		err := db.Update(func(txn *badger.Txn) error {
			return txn.Set(dataKey("bench", 0, uint64(i)), payload)
		})
		if err != nil {
			b.Error(err)
		}
	})
	b.StopTimer()
	return d
}

// cpuTime returns the process's CPU time so far (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchBatched writes n events through one Badger WriteBatch (sync
// writes) and flushes it: Badger's own batched write path. It returns the
// elapsed and the CPU time.
func benchBatched(b *testing.B, n int, payload []byte) (time.Duration, time.Duration) {
	b.StopTimer()
	db := openRaw(b)
	defer db.Close()
	b.StartTimer()
	start, cpu := time.Now(), cpuTime()
	wb := db.NewWriteBatch()
	for i := range n {
		if err := wb.Set(dataKey("bench", 0, uint64(i)), payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	d, cpu := time.Since(start), cpuTime()-cpu
	b.StopTimer()
	return d, cpu
}

// benchStore appends n events from w goroutines and returns the elapsed
// time, the CPU time and the number of Badger commits.
func benchStore(b *testing.B, n, writers int, payload []byte, opts Options) (time.Duration, time.Duration, uint64) {
	b.StopTimer()
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st, err := s.CreateStream("bench", StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	commits := s.Stats().Commits
	b.StartTimer()
	cpu := cpuTime()
	d := spread(n, writers, func(i int) {
		if _, err := st.Append(ctx, Event{RoutingKey: "drone", Writer: "w", Payload: payload}); err != nil {
			b.Error(err)
		}
	})
	cpu = cpuTime() - cpu
	b.StopTimer()
	return d, cpu, s.Stats().Commits - commits
}

// BenchmarkGroupCommitWindow measures the group commit window's choices
// (off, 0.5, 1, 2, 5 ms) under the two load shapes of the agent: W
// writers each waiting for its ack (video drones, Append), and one
// producer keeping up to 1000 appends unacknowledged (telemetry: one
// goroutine calling AppendAsync, the broker's in-flight window). 200 B
// events, durability always. Metrics: ev/s, syncs/ev (Badger commits per
// event), cpu-us/ev (process CPU per event), p50-us and p99-us (append to
// acknowledgement).
func BenchmarkGroupCommitWindow(b *testing.B) {
	payload := make([]byte, 200)
	for _, load := range []string{"writers=1", "writers=8", "writers=64", "async=1000"} {
		for _, w := range []time.Duration{-1, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond} {
			name := "window=off"
			if w > 0 {
				name = "window=" + w.String()
			}
			b.Run(load+"/"+name, func(b *testing.B) {
				var writers, inflight int
				if _, err := fmt.Sscanf(load, "writers=%d", &writers); err != nil {
					fmt.Sscanf(load, "async=%d", &inflight)
				}
				b.StopTimer()
				s, err := Open(b.TempDir(), Options{Logger: slog.New(slog.DiscardHandler), GroupCommitWindow: w})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				st, err := s.CreateStream("bench", StreamConfig{})
				if err != nil {
					b.Fatal(err)
				}
				lat := make([]time.Duration, b.N)
				ev := Event{RoutingKey: "drone", Writer: "w", Payload: payload}
				ctx := context.Background()
				commits := s.Stats().Commits
				b.StartTimer()
				cpu, start := cpuTime(), time.Now()
				if writers > 0 {
					spread(b.N, writers, func(i int) {
						t := time.Now()
						if _, err := st.Append(ctx, ev); err != nil {
							b.Error(err)
						}
						lat[i] = time.Since(t)
					})
				} else {
					sem := make(chan struct{}, inflight)
					var wg sync.WaitGroup
					for i := range b.N {
						sem <- struct{}{}
						wg.Add(1)
						t := time.Now()
						err := st.AppendAsync(ctx, ev, func(_ Position, err error) {
							if err != nil {
								b.Error(err)
							}
							lat[i] = time.Since(t)
							<-sem
							wg.Done()
						})
						if err != nil {
							b.Fatal(err)
						}
					}
					wg.Wait()
				}
				d, cpu := time.Since(start), cpuTime()-cpu
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(b.N)/d.Seconds(), "ev/s")
				b.ReportMetric(float64(s.Stats().Commits-commits)/float64(b.N), "syncs/ev")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/ev")
				b.ReportMetric(float64(lat[b.N/2].Microseconds()), "p50-us")
				b.ReportMetric(float64(lat[b.N*99/100].Microseconds()), "p99-us")
			})
		}
	}
}

// BenchmarkTableCompression measures what Badger's table compression
// costs and saves on the store's small records (values below
// ValueThreshold live in the LSM tree): 200k telemetry records (drone-like
// JSON, or 200 random bytes) written through a WriteBatch, then the
// memtable flush at Close (the table build and its compression, the part
// that depends on the codec), the LSM size and a full scan after reopen.
// Metrics per event: flush-cpu-us, read-cpu-us, lsm-B (bytes on disk) and
// rec-B (the record's size).
func BenchmarkTableCompression(b *testing.B) {
	const n = 200000
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range []string{"json", "random"} {
		recs := make([][]byte, n)
		for i := range n {
			p := make([]byte, 200)
			if kind == "json" {
				p = fmt.Appendf(p[:0], `{"drone":"drone-3","ts":%d,"lat":%.6f,"lon":%.6f,"alt":%.1f,"speed":%.2f,"heading":%d,"battery":%d,"mode":"AUTO","gps_fix":3}`,
					1764500000000+int64(i)*10, 48.1+rng.Float64()/100, 11.5+rng.Float64()/100, 120+rng.Float64()*5, rng.Float64()*20, rng.IntN(360), 80-i/10000)
			} else {
				for j := range p {
					p[j] = byte(rng.Uint32())
				}
			}
			t := int64(1764500000000000000) + int64(i)*1e7
			ev := Event{RoutingKey: "drone-3", Writer: "telemetry/drone-3", EventTime: t, IngestTime: t + 12345,
				ContentType: "application/json", Headers: []Header{{"mqtt-topic", "drones/drone-3/telemetry"}}, Payload: p}
			recs[i] = appendRecord(nil, &ev)
		}
		for _, c := range []options.CompressionType{options.None, options.Snappy, options.ZSTD} {
			name := map[options.CompressionType]string{options.None: "none", options.Snappy: "snappy", options.ZSTD: "zstd1"}[c]
			b.Run(kind+"/"+name, func(b *testing.B) {
				for range b.N {
					dir := b.TempDir()
					bo := badger.DefaultOptions(dir).WithValueThreshold(1 << 10).WithMemTableSize(64 << 20).
						WithNumVersionsToKeep(1).WithDetectConflicts(false).WithLogger(nil).
						WithCompression(c).WithZSTDCompressionLevel(1)
					db, err := badger.Open(bo)
					if err != nil {
						b.Fatal(err)
					}
					wb := db.NewWriteBatch()
					for i, r := range recs {
						if err := wb.Set(dataKey("telemetry", 0, uint64(i)), r); err != nil {
							b.Fatal(err)
						}
					}
					if err := wb.Flush(); err != nil {
						b.Fatal(err)
					}
					flush := cpuTime()
					if err := db.Close(); err != nil { // flushes the memtable to a table
						b.Fatal(err)
					}
					flush = cpuTime() - flush
					if db, err = badger.Open(bo); err != nil {
						b.Fatal(err)
					}
					lsm, _ := db.Size()
					read := cpuTime()
					err = db.View(func(txn *badger.Txn) error {
						it := txn.NewIterator(badger.IteratorOptions{})
						defer it.Close()
						for it.Rewind(); it.Valid(); it.Next() {
							if err := it.Item().Value(func([]byte) error { return nil }); err != nil {
								return err
							}
						}
						return nil
					})
					read = cpuTime() - read
					if err != nil {
						b.Fatal(err)
					}
					db.Close()
					b.ReportMetric(float64(flush.Nanoseconds())/1e3/n, "flush-cpu-us/ev")
					b.ReportMetric(float64(read.Nanoseconds())/1e3/n, "read-cpu-us/ev")
					b.ReportMetric(float64(lsm)/n, "lsm-B/ev")
					b.ReportMetric(float64(len(recs[0])), "rec-B")
				}
			})
		}
	}
}
