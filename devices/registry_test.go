package devices

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

type transitions struct {
	mu  sync.Mutex
	log []string
}

func (tr *transitions) add(s string) { tr.mu.Lock(); tr.log = append(tr.log, s); tr.mu.Unlock() }
func (tr *transitions) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.log...)
}

func newTestRegistry(t *testing.T, clk *clock, cfg RegistryConfig) (*Registry, *transitions) {
	t.Helper()
	tr := &transitions{}
	cfg.Now = clk.Now
	cfg.OnOffline = func(d, reason string) { tr.add("off:" + d + ":" + reason) }
	cfg.OnOnline = func(d string) { tr.add("on:" + d) }
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, tr
}

func TestRegistrySeenAndSilence(t *testing.T) {
	clk := newClock()
	r, tr := newTestRegistry(t, clk, RegistryConfig{OfflineAfter: 10 * time.Second})
	t0 := clk.Now()
	r.Seen("d1", SourceMQTT("drones/d1/telemetry"), 100, t0)
	r.Seen("d1", SourceRTP(0x1a2b3c4d, "10.0.0.5:5004"), 1000, clk.Add(time.Second))
	r.Seen("d1", SourceMQTT("drones/d1/telemetry"), 50, clk.Add(time.Second))
	r.Seen("d2", "", 7, clk.Now())

	d, ok := r.Get("d1")
	if !ok || !d.Online || d.Events != 3 || d.Bytes != 1150 || !d.FirstSeen.Equal(t0) || !d.LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("d1 = %+v", d)
	}
	if len(d.Sources) != 2 || d.Sources[0].ID != "mqtt:drones/d1/telemetry" || d.Sources[0].Events != 2 ||
		d.Sources[0].Bytes != 150 || d.Sources[1].ID != "rtp:ssrc=1a2b3c4d@10.0.0.5:5004" || d.Sources[1].Events != 1 {
		t.Fatalf("d1 sources = %+v", d.Sources)
	}

	// 9.9 s after d1's last activity: still online.
	clk.Add(9900 * time.Millisecond)
	if n := r.Check(); n != 0 {
		t.Fatalf("Check marked %d before the timeout", n)
	}
	// d2 was seen at the same time as d1's last; both go silent together.
	clk.Add(100 * time.Millisecond)
	if n := r.Check(); n != 2 {
		t.Fatalf("Check marked %d, want 2", n)
	}
	if n := r.Check(); n != 0 {
		t.Fatalf("second Check marked %d again", n)
	}
	d, _ = r.Get("d1")
	if d.Online || d.OfflineReason != OfflineSilence || !d.Since.Equal(clk.Now()) || d.Transitions != 1 {
		t.Fatalf("d1 after silence = %+v", d)
	}
	// Activity brings it back.
	r.Seen("d1", SourceMQTT("drones/d1/telemetry"), 1, clk.Add(time.Second))
	d, _ = r.Get("d1")
	if !d.Online || d.OfflineReason != "" || d.Transitions != 2 {
		t.Fatalf("d1 after return = %+v", d)
	}
	want := []string{"on:d1", "on:d2", "off:d1:silence", "off:d2:silence", "on:d1"}
	got := tr.get()
	// The two silence transitions come from one map walk: order them.
	if len(got) == 5 && got[2] > got[3] {
		got[2], got[3] = got[3], got[2]
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	st := r.Stats()
	if st.Drones != 2 || st.Online != 1 || st.OfflineSilence != 2 || st.OfflineExplicit != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRegistryExplicitOnlineOffline(t *testing.T) {
	clk := newClock()
	r, tr := newTestRegistry(t, clk, RegistryConfig{OfflineAfter: 10 * time.Second})
	r.SetOnline("d1", true, clk.Now()) // status "online" registers the drone
	r.Seen("d1", SourceMQTT("drones/d1/telemetry"), 10, clk.Add(time.Second))
	r.SetOnline("d1", false, clk.Add(time.Second)) // last will
	d, _ := r.Get("d1")
	if d.Online || d.OfflineReason != OfflineExplicit {
		t.Fatalf("after LWT: %+v", d)
	}
	clk.Add(time.Minute)
	if n := r.Check(); n != 0 {
		t.Fatalf("Check re-marked an offline drone: %d", n)
	}
	r.SetOnline("d1", false, clk.Now()) // repeated LWT: no second callback
	r.SetOnline("d1", true, clk.Now())
	want := []string{"on:d1", "off:d1:explicit", "on:d1"}
	if got := tr.get(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	if st := r.Stats(); st.OfflineExplicit != 1 || st.Online != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRegistryDropsAndBounds(t *testing.T) {
	clk := newClock()
	r, _ := newTestRegistry(t, clk, RegistryConfig{OfflineAfter: time.Second, MaxDrones: 2, MaxSources: 1})
	r.Drop("ghost", "oversize") // unknown: not registered
	r.Seen("d1", "mqtt:a", 1, clk.Now())
	r.Seen("d1", "mqtt:b", 1, clk.Now()) // beyond MaxSources
	r.Drop("d1", "oversize")
	r.Drop("d1", "oversize")
	r.Drop("d1", "disk_full")
	d, _ := r.Get("d1")
	if d.Drops["oversize"] != 2 || d.Drops["disk_full"] != 1 || len(d.Sources) != 1 || d.SourcesDropped != 1 || d.Events != 2 {
		t.Fatalf("d1 = %+v", d)
	}
	if _, ok := r.Get("ghost"); ok {
		t.Fatal("a drop registered a drone")
	}
	r.Seen("d2", "", 1, clk.Now())
	r.Seen("d3", "", 1, clk.Now()) // full of online drones: rejected
	if _, ok := r.Get("d3"); ok || r.Stats().DronesRejected != 1 {
		t.Fatalf("d3 registered into a full registry: %+v", r.Stats())
	}
	clk.Add(2 * time.Second)
	r.Seen("d2", "", 1, clk.Now()) // d2 stays online, d1 goes silent
	r.Check()
	r.Seen("d3", "", 1, clk.Now()) // evicts d1, the offline one
	if _, ok := r.Get("d1"); ok {
		t.Fatal("d1 not evicted")
	}
	if st := r.Stats(); st.Drones != 2 || st.DronesEvicted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	clk := newClock()
	var offline sync.Map
	r, err := NewRegistry(RegistryConfig{OfflineAfter: time.Second, Now: clk.Now,
		OnOffline: func(d, _ string) { offline.Store(d, true) }})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, per = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r.Seen(fmt.Sprintf("d%d", i%4), fmt.Sprintf("mqtt:t%d", g), 3, clk.Now())
				if i%50 == 0 {
					r.Check()
					_ = r.Snapshot()
				}
			}
		}()
	}
	wg.Wait()
	var events, bytes uint64
	for _, d := range r.Snapshot() {
		events += d.Events
		bytes += d.Bytes
		if len(d.Sources) != goroutines {
			t.Fatalf("%s has %d sources", d.ID, len(d.Sources))
		}
	}
	if events != goroutines*per || bytes != 3*goroutines*per {
		t.Fatalf("events %d bytes %d", events, bytes)
	}
	clk.Add(time.Second)
	if n := r.Check(); n != 4 {
		t.Fatalf("Check = %d, want 4", n)
	}
	n := 0
	offline.Range(func(any, any) bool { n++; return true })
	if n != 4 {
		t.Fatalf("OnOffline for %d drones", n)
	}
}

// TestRegistryRun runs in a synctest bubble: the check interval's ticker
// and the 5 s patience are the bubble's clock, so load cannot stretch them.
func TestRegistryRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newClock()
		off := make(chan string, 1)
		r, err := NewRegistry(RegistryConfig{OfflineAfter: time.Second, CheckInterval: 5 * time.Millisecond, Now: clk.Now,
			OnOffline: func(d, _ string) { off <- d }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		r.Seen("d1", "", 1, clk.Now())
		clk.Add(2 * time.Second)
		select {
		case d := <-off:
			if d != "d1" {
				t.Fatalf("offline %q", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not detect silence")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestRegistryConfigValidate(t *testing.T) {
	for _, c := range []RegistryConfig{{OfflineAfter: -1}, {MaxDrones: -1}, {MaxSources: -2}} {
		if _, err := NewRegistry(c); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: err %v", c, err)
		}
	}
}

// TestObserve: the append wrappers record durable appends as activity and
// failed ones as drops, against a real store (disk full injected through
// the store's FreeSpace).
func TestObserve(t *testing.T) {
	clk := newClock()
	var free sync.Mutex
	freeBytes := int64(1 << 40)
	s := rigs.OpenStore(t, t.TempDir(), localstream.Options{MinFreeBytes: 1 << 20, FreeSpace: func(string) (int64, error) {
		free.Lock()
		defer free.Unlock()
		return freeBytes, nil
	}})
	st, err := s.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := newTestRegistry(t, clk, RegistryConfig{})
	ctx := context.Background()
	sync := r.Observe(st)
	async := r.ObserveAsync(st)
	ev := localstream.Event{RoutingKey: "d1", Writer: "telemetry/d1", IngestTime: clk.Now().UnixNano(),
		Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/d1/telemetry"}}, Payload: []byte("0123456789")}
	if _, err := sync.Append(ctx, ev); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	vid := localstream.Event{RoutingKey: "d1", Writer: "video/d1", IngestTime: clk.Now().UnixNano(),
		Headers: []localstream.Header{{Key: "ssrc", Value: "0000abcd"}}, Payload: make([]byte, 90)}
	if err := async.AppendAsync(ctx, vid, func(_ localstream.Position, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A group (the MAVLink intake's): each event recorded, its memory
	// reused by the caller at once.
	group := r.ObserveGroup(st)
	mav := make([]localstream.Event, 3)
	for i := range mav {
		mav[i] = localstream.Event{RoutingKey: "d2", Writer: "mavlink/d2", IngestTime: clk.Now().UnixNano(), Payload: make([]byte, 20)}
	}
	if err := group.AppendGroupAsync(ctx, mav, func(_ []localstream.Position, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	clear(mav[0].Payload)
	mav[0].RoutingKey = "reused"
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d2, _ := r.Get("d2"); d2.Events != 3 || d2.Bytes != 60 || len(d2.Sources) != 1 || d2.Sources[0].ID != "writer:mavlink/d2" {
		t.Fatalf("d2 = %+v", d2)
	}
	mav[0].RoutingKey = "d2"
	d, _ := r.Get("d1")
	if d.Events != 2 || d.Bytes != 100 || len(d.Sources) != 2 || d.Sources[0].ID != "mqtt:drones/d1/telemetry" || d.Sources[1].ID != "rtp:ssrc=0000abcd" {
		t.Fatalf("d1 = %+v", d)
	}
	// Fill the disk: the store refuses, the registry counts a drop.
	free.Lock()
	freeBytes = 0
	free.Unlock()
	var lastErr error
	if !testkit.Until(5*time.Second, func() bool { // the store re-measures free space every 250ms
		_, lastErr = sync.Append(ctx, ev)
		return errors.Is(lastErr, localstream.ErrDiskFull)
	}) {
		t.Fatalf("store never reported disk full (last err %v)", lastErr)
	}
	if err := async.AppendAsync(ctx, vid, func(localstream.Position, error) {}); !errors.Is(err, localstream.ErrDiskFull) {
		t.Fatalf("async append on a full disk: %v", err)
	}
	d, _ = r.Get("d1")
	if d.Drops["disk_full"] < 2 {
		t.Fatalf("drops %v", d.Drops)
	}
	if err := group.AppendGroupAsync(ctx, mav, func([]localstream.Position, error) {}); !errors.Is(err, localstream.ErrDiskFull) {
		t.Fatalf("group append on a full disk: %v", err)
	}
	if d2, _ := r.Get("d2"); d2.Drops["disk_full"] != 3 {
		t.Fatalf("d2 drops %v after a refused group of 3", d2.Drops)
	}
}

func TestObserveOffline(t *testing.T) {
	clk := newClock()
	r, tr := newTestRegistry(t, clk, RegistryConfig{})
	m := &recMarks{}
	r.Seen("d1", "", 1, clk.Now())
	wrapped := r.ObserveOffline(m)
	if err := wrapped.CloseWriter("telemetry/d1"); err != nil {
		t.Fatal(err)
	}
	if d, _ := r.Get("d1"); d.Online || d.OfflineReason != OfflineExplicit {
		t.Fatalf("d1 = %+v", d)
	}
	if len(m.closed) != 1 || m.closed[0] != "telemetry/d1" {
		t.Fatalf("closed %v", m.closed)
	}
	if got := tr.get(); fmt.Sprint(got) != "[on:d1 off:d1:explicit]" {
		t.Fatalf("transitions %v", got)
	}
}
