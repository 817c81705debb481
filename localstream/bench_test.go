package localstream

import (
	"context"
	"fmt"
	"log/slog"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// BenchmarkDurableAppend measures durable (fsync'd) appends side by side
// with raw Badger doing the same writes with the same durability in the
// same run: each writer goroutine does one synced transaction per event.
// Metrics: store-ev/s, raw-ev/s and ratio = store / raw.
func BenchmarkDurableAppend(b *testing.B) {
	for _, size := range []int{200, 1200, 256 << 10} {
		for _, writers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("size=%d/writers=%d", size, writers), func(b *testing.B) {
				payload := make([]byte, size)
				for i := range payload {
					payload[i] = byte(i * 7)
				}
				raw := benchRaw(b, b.N, writers, payload)
				store := benchStore(b, b.N, writers, payload)
				b.ReportMetric(float64(b.N)/store.Seconds(), "store-ev/s")
				b.ReportMetric(float64(b.N)/raw.Seconds(), "raw-ev/s")
				b.ReportMetric(raw.Seconds()/store.Seconds(), "ratio")
				b.ReportMetric(float64(b.N*size)/store.Seconds()/1e6, "store-MB/s")
				b.SetBytes(int64(size))
			})
		}
	}
}

// spread runs n jobs over w goroutines and returns the elapsed time.
func spread(n, w int, job func(i int)) time.Duration {
	var next atomic.Int64
	var wg stdsync.WaitGroup
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

func benchRaw(b *testing.B, n, writers int, payload []byte) time.Duration {
	b.StopTimer()
	opts := Options{}.withDefaults()
	db, err := badger.Open(badger.DefaultOptions(b.TempDir()).WithSyncWrites(true).
		WithValueThreshold(opts.ValueThreshold).WithMemTableSize(opts.MemTableSize).
		WithNumVersionsToKeep(1).WithDetectConflicts(false).WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
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

func benchStore(b *testing.B, n, writers int, payload []byte) time.Duration {
	b.StopTimer()
	s, err := Open(b.TempDir(), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st, err := s.CreateStream("bench", StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.StartTimer()
	d := spread(n, writers, func(i int) {
		if _, err := st.Append(ctx, Event{RoutingKey: "drone", Writer: "w", Payload: payload}); err != nil {
			b.Error(err)
		}
	})
	b.StopTimer()
	return d
}
