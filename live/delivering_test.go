package live

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestLaneErrorClearedOnceDelivering (issue 40 item 5): EDGELIVE is
// deleted under the lane, so the next value's publish is refused and the
// lane says why; once it has checked the stream again and its next value
// is at the centre, that error is past and gone from its stats, as the
// replication's and the RTSP sources' are.
func TestLaneErrorClearedOnceDelivering(t *testing.T) {
	ctx := context.Background()
	s := newStation(t, stationOpts{})
	s.start(stationOpts{lane: true})
	js, _ := jetstream.New(s.reader)
	seq := 0
	next := func(what string) { t.Helper(); sendNext(ctx, t, s, &seq, what) }
	next("the first value at the centre")
	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	seq++
	s.appendNoted(ctx, "telemetry", telemetryEvent("d1", seq, time.Now().UnixNano()))
	var st Stats
	testkit.WaitFor(t, 10*time.Second, "a publish refused", func() bool {
		st = s.lane.Stats()
		return st.Streams[0].PublishErrors > 0 && st.LastError != ""
	})
	t.Logf("refused: %q", st.LastError)
	next("a value at the centre after the refusal")
	next("another value at the centre") // the error's cause is past
	if st = s.lane.Stats(); st.LastError != "" {
		t.Fatalf("the lane delivers again (value %d at the centre, %d sent) but still shows %q", seq, st.Streams[0].Sent, st.LastError)
	}
}

// TestLaneSaysWhenNotDelivering (issue 40 item 5): drones fly while the
// link to the centre is down; the lane's telemetry says since when it
// has not delivered (it showed its counters only, "problems 0", with its
// last value 36 s old), and says so no more once values reach the centre
// again, nor once nothing waits (the drones landed and their last values
// are there).
func TestLaneSaysWhenNotDelivering(t *testing.T) {
	ctx := context.Background()
	s := newStation(t, stationOpts{})
	s.start(stationOpts{lane: true})
	fly, land := context.WithCancel(ctx)
	defer land()
	flown := make(chan struct{})
	f := newFleet(2, 0)
	go func() { defer close(flown); f.fly(fly, s.append) }()
	tel := func() StreamStats { return s.lane.Stats().Streams[0] }
	testkit.WaitFor(t, 10*time.Second, "values delivered", func() bool { return tel().Sent >= 2 })
	if st := tel(); !st.NotDeliveringSince.IsZero() {
		t.Fatalf("delivering, yet not delivering since %v", st.NotDeliveringSince)
	}
	cut := time.Now()
	s.proxy.setDown(true)
	var st StreamStats
	if !testkit.Until(5*time.Second, func() bool { st = tel(); return !st.NotDeliveringSince.IsZero() }) {
		t.Fatalf("link down %s with the drones flying: the lane does not say it is not delivering: %+v", time.Since(cut), st)
	}
	if st.NotDeliveringSince.Before(cut) || st.NotDeliveringSince.After(cut.Add(2*time.Second)) || st.LastSent.After(cut) {
		t.Fatalf("link down at %v: not delivering since %v, last sent %v", cut, st.NotDeliveringSince, st.LastSent)
	}
	time.Sleep(time.Second)
	if again := tel(); !again.NotDeliveringSince.Equal(st.NotDeliveringSince) {
		t.Fatalf("the outage's start moved: %v, then %v", st.NotDeliveringSince, again.NotDeliveringSince)
	}
	sent := st.Sent
	s.proxy.setDown(false)
	testkit.WaitFor(t, 10*time.Second, "delivering again", func() bool {
		st = tel()
		return st.Sent > sent && st.NotDeliveringSince.IsZero()
	})
	land()
	<-flown
	testkit.WaitFor(t, 10*time.Second, "the landed drones' last values at the centre", func() bool {
		return hasSeq(liveValue(ctx, s, "tel-1"), f.seq["tel-1"]) && hasSeq(liveValue(ctx, s, "tel-2"), f.seq["tel-2"])
	})
	s.proxy.setDown(true)
	time.Sleep(2 * time.Second) // more than the 1 s interval: a value left would be due
	if st = tel(); !st.NotDeliveringSince.IsZero() {
		t.Fatalf("the drones landed and their last values are at the centre, yet not delivering since %v", st.NotDeliveringSince)
	}
}
