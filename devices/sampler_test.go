package devices

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/shirou/gopsutil/v3/cpu"
)

// TestSamplerWritesHealthEvents: Run appends real gopsutil samples to a real
// health stream, each followed by a mark at its durable position.
func TestSamplerWritesHealthEvents(t *testing.T) {
	dir := t.TempDir()
	s := rigs.OpenStore(t, dir, localstream.Options{})
	st, err := s.CreateStream("health", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	marks := &recMarks{}
	sm, err := NewSampler(HealthConfig{Agent: "gs-1", DataDir: dir, Interval: 20 * time.Millisecond,
		Now: func() time.Time { return clk.Add(time.Second) }, Logger: quietLogger()}, st, marks)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sm.Latest(); ok {
		t.Fatal("Latest before any sample")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- sm.Run(ctx) }()
	if !testkit.Until(10*time.Second, func() bool { return sm.Stats().Samples >= 4 }) {
		t.Fatalf("only %d samples: %+v", sm.Stats().Samples, sm.Stats())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	recs := readAll(t, st)
	notes := marks.Notes()
	if uint64(len(recs)) != sm.Stats().Samples || len(notes) != len(recs) {
		t.Fatalf("%d events, %d marks, stats %+v", len(recs), len(notes), sm.Stats())
	}
	var prev int64
	for i, rec := range recs {
		if rec.RoutingKey != "gs-1" || rec.Writer != "health/gs-1" || rec.ContentType != "application/json" {
			t.Fatalf("event %d: %+v", i, rec.Event)
		}
		var smp Sample
		if err := json.Unmarshal(rec.Payload, &smp); err != nil {
			t.Fatalf("event %d payload: %v", i, err)
		}
		if smp.V != SampleVersion || smp.Agent != "gs-1" || smp.TimeNs != rec.EventTime || !smp.Time.Equal(time.Unix(0, rec.EventTime)) {
			t.Fatalf("event %d: sample %+v, event time %d", i, smp, rec.EventTime)
		}
		if rec.EventTime <= prev {
			t.Fatalf("event time not increasing: %d after %d", rec.EventTime, prev)
		}
		prev = rec.EventTime
		if smp.Mem.Total == 0 || smp.CPU.Count == 0 || smp.Disk.Path != dir || smp.Disk.Total == 0 || smp.Disk.Free == 0 ||
			smp.UptimeS == 0 || smp.CPU.Percent < 0 || smp.CPU.Percent > 100 || len(smp.Errors) != 0 {
			t.Fatalf("event %d: implausible sample %+v", i, smp)
		}
		if n := notes[i]; n.writer != "health/gs-1" || n.t != rec.EventTime || n.pos != rec.Position {
			t.Fatalf("mark %d = %+v, event at %s time %d", i, n, rec.Position, rec.EventTime)
		}
	}
	last, ok := sm.Latest()
	if !ok || last.TimeNs < recs[len(recs)-1].EventTime { // a sample cut short by the cancel may be newer
		t.Fatalf("Latest %+v", last)
	}
}

// TestSamplerDiskFull: a store that refuses appends makes the sampler count
// and drop samples, not stop; it appends again once space returns.
func TestSamplerDiskFull(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	free := int64(0)
	s := rigs.OpenStore(t, dir, localstream.Options{MinFreeBytes: 1 << 20, FreeSpace: func(string) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return free, nil
	}})
	st, err := s.CreateStream("health", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := NewSampler(HealthConfig{Agent: "gs-1", DataDir: dir, Interval: 10 * time.Millisecond, Logger: quietLogger()}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := sm.SampleOnce(ctx); !errors.Is(err, localstream.ErrDiskFull) {
		t.Fatalf("sample on a full disk: %v", err)
	}
	done := make(chan error)
	go func() { done <- sm.Run(ctx) }()
	testkit.WaitFor(t, time.Minute, "append errors while full", func() bool { return sm.Stats().AppendErrors >= 3 })
	mu.Lock()
	free = 1 << 40
	mu.Unlock()
	testkit.WaitFor(t, time.Minute, "samples after space returned", func() bool { return sm.Stats().Samples >= 2 })
	cancel()
	<-done
	if n := len(readAll(t, st)); uint64(n) != sm.Stats().Samples {
		t.Fatalf("%d events, stats %+v", n, sm.Stats())
	}
}

func TestBusyPercent(t *testing.T) {
	prev := &cpu.TimesStat{User: 10, System: 5, Idle: 85}
	for _, tc := range []struct {
		prev, cur *cpu.TimesStat
		want      float64
	}{
		{nil, prev, 15},
		{prev, &cpu.TimesStat{User: 20, System: 5, Idle: 95}, 50},
		{prev, &cpu.TimesStat{User: 10, System: 5, Idle: 95, Iowait: 10}, 0},
		{prev, prev, 0}, // no time passed
		{prev, &cpu.TimesStat{User: 30, System: 5, Idle: 85}, 100},
	} {
		if got := busyPercent(tc.prev, tc.cur); got != tc.want {
			t.Errorf("busyPercent(%+v, %+v) = %g, want %g", tc.prev, tc.cur, got, tc.want)
		}
	}
}

func TestSamplerNilMarksPointer(t *testing.T) {
	dir := t.TempDir()
	st, _ := rigs.OpenStore(t, dir, localstream.Options{}).CreateStream("health", localstream.StreamConfig{})
	var m *recMarks // a missing tracker
	sm, err := NewSampler(HealthConfig{Agent: "gs-1", DataDir: dir}, st, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sm.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestHealthConfigValidate(t *testing.T) {
	for _, c := range []HealthConfig{{DataDir: "/x"}, {Agent: "a"}, {Agent: "a", DataDir: "/x", Interval: -1}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v", c, err)
		}
	}
}
