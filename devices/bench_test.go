package devices

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// BenchmarkAppend: the registry observer's cost on the append path,
// against plain appends to the same kind of store in the same run. The
// store runs in DurabilityPeriodic mode so that fsync latency (noise on a
// shared machine) does not hide the CPU cost being compared.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []string{"plain", "observed"} {
		b.Run(mode, func(b *testing.B) {
			s := rigs.OpenStore(b, b.TempDir(), localstream.Options{Durability: localstream.DurabilityPeriodic})
			st, err := s.CreateStream("telemetry", localstream.StreamConfig{})
			if err != nil {
				b.Fatal(err)
			}
			var app Appender = st
			if mode == "observed" {
				r, _ := NewRegistry(RegistryConfig{})
				app = r.Observe(st)
			}
			payload := make([]byte, 256)
			var n atomic.Int64
			b.SetBytes(int64(len(payload)))
			b.SetParallelism(16) // concurrent drones share group commits
			b.RunParallel(func(pb *testing.PB) {
				drone := fmt.Sprintf("d%d", n.Add(1))
				ev := localstream.Event{RoutingKey: drone, Writer: "telemetry/" + drone, IngestTime: time.Now().UnixNano(),
					Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + drone + "/telemetry"}}, Payload: payload}
				for pb.Next() {
					if _, err := app.Append(context.Background(), ev); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkSeen: Registry.Seen from 16 drones in parallel, against the
// least a registry can do (one mutex-guarded counter per drone).
func BenchmarkSeen(b *testing.B) {
	now := time.Now()
	b.Run("baseline-mutex-map", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string]uint64{}
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			d := fmt.Sprintf("d%d", n.Add(1)%16)
			for pb.Next() {
				mu.Lock()
				m[d]++
				mu.Unlock()
			}
		})
	})
	b.Run("registry", func(b *testing.B) {
		r, _ := NewRegistry(RegistryConfig{})
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			d := fmt.Sprintf("d%d", n.Add(1)%16)
			src := SourceMQTT("drones/" + d + "/telemetry")
			for pb.Next() {
				r.Seen(d, src, 256, now)
			}
		})
	})
}

// BenchmarkHealthSample: one gopsutil sample (probe only), and one
// sample appended durably with its mark.
func BenchmarkHealthSample(b *testing.B) {
	dir := b.TempDir()
	b.Run("probe", func(b *testing.B) {
		p := probe{dir: dir}
		for b.Loop() {
			p.sample(context.Background(), "gs-1", time.Now())
		}
	})
	b.Run("sample-append-mark", func(b *testing.B) {
		s := rigs.OpenStore(b, dir+"/store", localstream.Options{})
		st, _ := s.CreateStream("health", localstream.StreamConfig{})
		sm, err := NewSampler(HealthConfig{Agent: "gs-1", DataDir: dir}, st, &recMarks{})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := sm.SampleOnce(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPressureCheck: a check with plenty of free space (the steady
// state: one statfs), and a check that sheds 10% of a 2000-event video
// stream (refilled between iterations, outside the timer).
func BenchmarkPressureCheck(b *testing.B) {
	s := rigs.OpenStore(b, b.TempDir(), localstream.Options{MinFreeBytes: -1})
	st, _ := s.CreateStream("video", localstream.StreamConfig{})
	d := &fakeDisk{free: 1000, total: 1000}
	p, err := NewPressure(s, PressureConfig{RetainBelow: Threshold{Bytes: 500}, ShedBelow: Threshold{Bytes: 200},
		Policy: []ShedRule{{Stream: "video", AllowUnreplicated: true}}, DiskSpace: d.space, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ok", func(b *testing.B) {
		d.set(1000)
		for b.Loop() {
			p.Check(context.Background())
		}
	})
	b.Run("ok-statfs", func(b *testing.B) {
		real, err := NewPressure(s, PressureConfig{Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if st, err := real.Check(context.Background()); err != nil || st != StateOK {
				b.Fatal(st, err)
			}
		}
	})
	b.Run("shed-10pct-of-2000x32KiB", func(b *testing.B) {
		payload := make([]byte, 32<<10)
		d.set(100)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			var wg sync.WaitGroup
			for range 2000 - int(retainedEvents(st.Topology())) {
				wg.Add(1)
				st.AppendAsync(context.Background(), localstream.Event{RoutingKey: "d1", Writer: "video/d1", Payload: payload},
					func(localstream.Position, error) { wg.Done() })
			}
			wg.Wait()
			b.StartTimer()
			p.Check(context.Background())
		}
	})
}

// instantAppender completes every append at once (the observer's own cost).
type instantAppender struct{ n uint64 }

func (a *instantAppender) AppendAsync(_ context.Context, _ localstream.Event, cb func(localstream.Position, error), _ ...localstream.AppendOption) error {
	a.n++
	cb(localstream.Position{Offset: a.n}, nil)
	return nil
}

// BenchmarkObserveAsync: what the registry's observer adds to one
// telemetry append (the wrapper, its callback and the sighting), with an
// appender that completes at once.
func BenchmarkObserveAsync(b *testing.B) {
	r, _ := NewRegistry(RegistryConfig{})
	app := r.ObserveAsync(&instantAppender{})
	evs := make([]localstream.Event, 8)
	for i := range evs {
		d := fmt.Sprintf("drone-%d", i)
		evs[i] = localstream.Event{RoutingKey: d, Writer: "telemetry/" + d, IngestTime: time.Now().UnixNano(),
			Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}}, Payload: make([]byte, 200)}
	}
	done := func(localstream.Position, error) {}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := app.AppendAsync(context.Background(), evs[i%len(evs)], done); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
