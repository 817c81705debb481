package live

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestLiveShareAtProxy: the lane never takes more than its share of the
// uplink cap, measured at the link (the proxy parses every publish and
// counts the live ones' bytes on the wire), while it wants far more (60
// drones every 100 ms: about 15 times its share) and a backlog takes the
// rest of the cap.
func TestLiveShareAtProxy(t *testing.T) {
	const capBps, share = 250_000, 0.1 // 2 Mbit/s, a tenth for the lane
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newStation(t, stationOpts{}) // the link uncapped: the agent's own cap is measured
	s.proxy.setDown(true)
	cfg := NewDefaultConfig()
	cfg.Share = share
	cfg.Streams["telemetry"] = StreamConfig{Interval: 100 * time.Millisecond}
	s.start(stationOpts{capBps: capBps, lane: true, live: cfg})
	// A backlog: 20 s of two video drones captured offline.
	f := newFleet(0, 2)
	if err := f.capture(ctx, s.append, 20*time.Second, time.Now()); err != nil {
		t.Fatal(err)
	}
	// 60 drones report at 10 Hz.
	flyCtx, stopFly := context.WithCancel(ctx)
	defer stopFly()
	flying := make(chan error, 1)
	go func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ; i++ {
			for d := range 60 {
				if err := s.append(flyCtx, "telemetry", telemetryEvent(fmt.Sprintf("d%02d", d), i, time.Now().UnixNano())); err != nil {
					flying <- nil
					return
				}
			}
			select {
			case <-flyCtx.Done():
				flying <- nil
				return
			case <-tk.C:
			}
		}
	}()
	start := time.Now()
	s.proxy.setDown(false)
	time.Sleep(12 * time.Second) // the measured interval: the share is checked over it
	end := time.Now()
	stopFly()
	<-flying
	stats := s.repl.Stats()
	for _, st := range stats {
		t.Logf("%s: %s txns %d events %d bytes %d backlog %d retries %d err %s", st.Stream, st.State, st.Txns, st.Events, st.Bytes, st.BacklogEvents, st.Retries, st.LastError)
	}
	s.stop()

	liveRate := float64(capBps) * share
	maxMsg := 0
	for _, st := range s.lane.Stats().Streams {
		if st.Sent > 0 {
			maxMsg = max(maxMsg, int(st.Bytes/st.Sent)*2)
		}
	}
	slack := float64(s.lane.shareChunk + maxMsg)
	var worst float64
	for w := time.Second; w <= end.Sub(start); w += time.Second {
		for from := start; !from.Add(w).After(end); from = from.Add(250 * time.Millisecond) {
			live, _ := s.proxy.window(from, from.Add(w))
			if bound := liveRate*w.Seconds() + slack; float64(live) > bound {
				t.Errorf("live lane: %d bytes at the link in %v from +%v, above its share %.0f B/s × %v + %.0f",
					live, w, from.Sub(start).Round(time.Millisecond), liveRate, w, slack)
			}
			worst = max(worst, float64(live)/w.Seconds())
		}
	}
	live, other := s.proxy.window(start, end)
	secs := end.Sub(start).Seconds()
	t.Logf("at the link over %.1f s: live %.0f B/s (share %.0f, worst window %.0f), backlog and protocol %.0f B/s; cap %d B/s; %d live messages",
		secs, float64(live)/secs, liveRate, worst, float64(other)/secs, capBps, s.proxy.liveMsgs.Load())
	if float64(live)/secs < 0.7*liveRate {
		t.Errorf("live lane used %.0f B/s of its %.0f: it was not under pressure, the bound proves nothing", float64(live)/secs, liveRate)
	}
	// The backlog had the rest of the cap: the uplink counts an event as
	// its payload and 256 bytes (a layout-2 pack of JSON telemetry is far
	// smaller on the wire, so the link shows less than the cap).
	var granted float64
	for _, st := range stats {
		granted += float64(st.Bytes) + 256*float64(st.Events)
	}
	if granted/secs < 0.5*(capBps-liveRate) {
		t.Errorf("the backlog was granted %.0f B/s of the %d cap beside the lane", granted/secs, capBps)
	}
}
