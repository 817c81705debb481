package live

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// TestCoveredFollowsDrain (issue 38): after an outage with a backlog,
// `read --live` (Read) is polled all through the drain, with the drones
// still flying. The history of each writer is thinned (5 Hz over 600 s
// fills its 1,024 marks three times over), so the stated bound applies:
// the backlog's span ÷ 256 (docs/watermark.md). Checked against the commit
// records at the centre:
//   - every commit's lower is within the bound of the oldest of the
//     drones' newest events it committed;
//   - a value is never covered before it is committed (the watermark is
//     never ahead of the committed data);
//   - a value is covered at every read made once a commit whose data
//     reaches the value's time plus the bound, for every drone, was at
//     the centre before the read began — `covered` follows the drain.
func TestCoveredFollowsDrain(t *testing.T) {
	coveredFollowsDrain(t, 5, 15_000) // B/s: a drain of some 40 commits
}

// TestCoveredFollowsDrainAtScale is TestCoveredFollowsDrain at the
// issue's scale, BenchmarkDrainAfterOutage's: 4 drones at 20 Hz, a
// 2 Mbit/s link (a drain of ~10 full packs, each ~4 s of events).
func TestCoveredFollowsDrainAtScale(t *testing.T) {
	coveredFollowsDrain(t, 20, 250_000)
}

func coveredFollowsDrain(t *testing.T, hz, link int) {
	const (
		drones = 4
		outage = 600 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newStation(t, stationOpts{proxyBps: link})
	s.proxy.setDown(true)
	// Each drone's value stays at the centre for 5 s, longer than the
	// bound and a commit: time for the backlog to pass it.
	cfg := NewDefaultConfig()
	tel := cfg.Streams["telemetry"]
	tel.Interval = 5 * time.Second
	cfg.Streams["telemetry"] = tel
	s.start(stationOpts{capBps: int64(link), lane: true, live: cfg, onWire: true})
	names := make([]string, drones)
	for d := range names {
		names[d] = fmt.Sprintf("drone-%d", d+1)
	}
	step := time.Second / time.Duration(hz)
	seq := 0
	var group []localstream.Event
	tick := func(ns int64) {
		seq++
		for _, d := range names {
			group = append(group, telemetryEvent(d, seq, ns))
		}
	}
	// The outage's backlog, at its past times; then the drones fly on.
	begin := time.Now().Add(-outage)
	for at := begin; at.Before(time.Now()); at = at.Add(step) {
		if tick(at.UnixNano()); len(group) >= 1000 {
			if err := s.appendGroup(ctx, "telemetry", group); err != nil {
				t.Fatal(err)
			}
			group = group[:0]
		}
	}
	flyCtx, stopFly := context.WithCancel(ctx)
	flying := make(chan error, 1)
	go func() {
		tk := time.NewTicker(step)
		defer tk.Stop()
		for {
			select {
			case <-flyCtx.Done():
				flying <- nil
				return
			case <-tk.C:
				tick(time.Now().UnixNano())
				if err := s.appendGroup(ctx, "telemetry", group); err != nil && flyCtx.Err() == nil {
					flying <- err
					return
				}
				group = group[:0]
			}
		}
	}()

	js, err := jetstream.New(s.reader)
	if err != nil {
		t.Fatal(err)
	}
	lastCommit := func() uint64 {
		st, err := js.Stream(ctx, wire.StreamName("telemetry"))
		if err != nil {
			return 0
		}
		m, err := st.GetLastMsgForSubject(ctx, wire.CutSubject("telemetry", s.agent))
		if err != nil {
			return 0
		}
		return m.Sequence
	}
	type read struct {
		at     time.Time
		before uint64 // the last commit at the centre when the read began
		vals   []Value
	}
	var reads []read
	up := time.Now()
	s.proxy.setDown(false)
	var drained time.Time
	for time.Since(up) < time.Minute && (drained.IsZero() || time.Since(drained) < 8*time.Second) {
		r := read{at: time.Now(), before: lastCommit()}
		vals, err := Read(ctx, s.reader, ReadOptions{Agent: s.agent, Stream: "telemetry"})
		if err != nil && !errors.Is(err, ErrNoLiveStream) {
			t.Fatal(err)
		}
		r.vals = vals
		reads = append(reads, r)
		if drained.IsZero() {
			for _, st := range s.repl.Stats() {
				if st.Stream == "telemetry" && st.WatermarkLowerNs > time.Now().Add(-time.Second).UnixNano() {
					drained = time.Now()
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopFly()
	if err := <-flying; err != nil {
		t.Fatal(err)
	}
	s.stop()
	if drained.IsZero() {
		t.Fatal("the backlog never drained")
	}
	// The backlog's span is at most the outage and the drain.
	bound := drained.Sub(begin) / 256

	type commit struct {
		seq    uint64
		lower  int64
		newest map[string]int64 // drone → its newest event committed so far
	}
	items, err := centralread.ReadAll(ctx, s.reader, "telemetry", centralread.ReadOptions{Agent: s.agent})
	if err != nil {
		t.Fatal(err)
	}
	var commits []commit
	newest := map[string]int64{}
	for _, it := range items {
		switch it.Kind {
		case centralread.ItemEvent:
			rec := it.Event.Record
			newest[rec.RoutingKey] = max(newest[rec.RoutingKey], rec.EventTime)
		case centralread.ItemCommit:
			c := commit{seq: it.Seq, lower: it.Commit.Watermark.LowerNs, newest: map[string]int64{}}
			for d, at := range newest {
				c.newest[d] = at
			}
			commits = append(commits, c)
		}
	}
	oldestNewest := func(c commit) int64 {
		if len(c.newest) < drones {
			return 0
		}
		o := c.newest[names[0]]
		for _, at := range c.newest {
			o = min(o, at)
		}
		return o
	}
	// Every commit's lower within the bound.
	var worst time.Duration
	for _, c := range commits {
		o := oldestNewest(c)
		if o == 0 || c.lower == 0 {
			continue
		}
		lag := time.Duration(o - c.lower)
		worst = max(worst, lag)
		if lag > bound {
			t.Errorf("commit seq %d: lower %s behind the oldest of the drones' newest committed events, bound %s", c.seq, lag, bound)
		}
	}
	at := func(seq uint64) (commit, bool) { // the last commit at or before seq
		var c commit
		ok := false
		for _, x := range commits {
			if x.seq > seq {
				break
			}
			c, ok = x, true
		}
		return c, ok
	}
	firstWithLower := func(lower int64) (commit, bool) {
		for _, c := range commits {
			if c.lower == lower {
				return c, true
			}
		}
		return commit{}, false
	}
	due := map[string]int{}     // reads at which a drone's value had to be covered
	covered := map[string]int{} // reads at which it was
	for _, r := range reads {
		before, haveBefore := at(r.before)
		for _, v := range r.vals {
			if v.Covered {
				covered[v.Drone]++
				c, ok := firstWithLower(v.CommittedLowerNs)
				if !ok {
					t.Errorf("read at +%s: %s covered by lower %d, which no commit record carries", r.at.Sub(up), v.Drone, v.CommittedLowerNs)
				} else if c.newest[v.Drone] < v.Time() {
					t.Errorf("read at +%s: %s's value at %d covered by commit seq %d, which holds its events up to %d only: the watermark ahead of the committed data",
						r.at.Sub(up), v.Drone, v.Time(), c.seq, c.newest[v.Drone])
				}
			}
			if haveBefore && oldestNewest(before) > v.Time()+int64(bound) {
				due[v.Drone]++
				if !v.Covered {
					t.Errorf("read at +%s: %s's value at %d not covered, though commit seq %d (before the read) holds every drone's events up to %d, more than the bound %s after it (lower %d)",
						r.at.Sub(up), v.Drone, v.Time(), before.seq, oldestNewest(before), bound, v.CommittedLowerNs)
				}
			}
		}
	}
	t.Logf("%d commits, %d reads; drained %.1f s after the link returned; the furthest lower behind: %s (bound %s); reads due covered %v, covered %v",
		len(commits), len(reads), drained.Sub(up).Seconds(), worst, bound, due, covered)
	for _, d := range names {
		if due[d] == 0 {
			t.Errorf("%s: no read was due covered: the test saw no drain reach a value", d)
		}
	}
}
