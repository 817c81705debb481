package mavlink

import (
	"net"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/common"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// skewRig is an intake on a fake clock with drones a (system 1) and b
// (system 2) whose gomavlib writers send over one TCP connection, and the
// real watermark tracker of its stream.
type skewRig struct {
	in     *Intake
	st     *localstream.Stream
	tr     *watermark.Tracker
	clk    *fakeClock
	c      net.Conn
	wa, wb *gomavlibWriter
}

// newSkewRig starts the rig with the tracker's opts (its clock set here).
func newSkewRig(t *testing.T, opts watermark.Options) *skewRig {
	s, st := openStore(t, t.TempDir())
	r := &skewRig{st: st, clk: &fakeClock{now: time.Unix(1_800_000_000, 0)}}
	opts.Now = r.clk.Now
	var err error
	if r.tr, err = watermark.NewTracker(st, s, opts); err != nil {
		t.Fatal(err)
	}
	cfg := localConfig()
	cfg.Now = r.clk.Now
	cfg.BatchWindow = 20 * time.Millisecond // a step waits for its batch
	cfg.Drones = map[uint8]string{1: "a", 2: "b"}
	r.in, _ = runIntake(t, cfg, st, r.tr)
	if r.c, err = net.Dial("tcp", r.in.TCPAddr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.c.Close() })
	r.wa, r.wb = newWriter(t, false, 1, 1, nil), newWriter(t, false, 2, 1, nil)
	return r
}

// TestGPSTimeHourOff: drone A's GPS time is an hour ahead, drone B's is
// right. A keeps its time but is flagged clock-skew (counted per drone);
// B is never late, and no watermark is ahead of the receiving clock plus
// the allowed skew (the real watermark tracker of the telemetry stream).
func TestGPSTimeHourOff(t *testing.T) {
	const skew = 10 * time.Second
	r := newSkewRig(t, watermark.Options{MaxClockSkew: skew})
	in, st, tr, clk, c, wa, wb := r.in, r.st, r.tr, r.clk, r.c, r.wa, r.wb
	frames := 0
	for i := range 60 {
		now := clk.Now()
		boot := uint32(10_000 + i*100)
		if i < 30 || i%2 == 0 { // A alone for 3 s, then both
			c.Write(wa.frame(t, &common.MessageSystemTime{TimeUnixUsec: uint64(now.Add(time.Hour).UnixMicro()), TimeBootMs: boot}))
			c.Write(wa.frame(t, &common.MessageGlobalPositionInt{TimeBootMs: boot}))
			frames += 2
		}
		if i >= 30 {
			c.Write(wb.frame(t, &common.MessageSystemTime{TimeUnixUsec: uint64(now.UnixMicro()), TimeBootMs: boot}))
			c.Write(wb.frame(t, &common.MessageGlobalPositionInt{TimeBootMs: boot}))
			frames += 2
		}
		testkit.WaitFor(t, 5*time.Second, "stored", func() bool { return in.Stats().Stored == uint64(frames) })
		w, err := tr.Local()
		if err != nil {
			t.Fatal(err)
		}
		if limit := now.Add(skew).UnixNano(); w.LowerNs > limit || w.UpperNs > limit {
			t.Fatalf("step %d: local watermark %s ahead of the receiving clock + %s", i, w, skew)
		}
		clk.Add(100 * time.Millisecond)
	}
	recs := byDrone(t, st)
	for _, r := range recs["b"] {
		if r.Flags.Has(localstream.FlagLate) || r.Flags.Has(localstream.FlagClockSkew) {
			t.Fatalf("b's event %s flagged %b", r.Position, r.Flags)
		}
	}
	for _, r := range recs["a"] {
		if !r.Flags.Has(localstream.FlagClockSkew) || r.EventTime < r.IngestTime+int64(59*time.Minute) {
			t.Fatalf("a's event %s: flags %b, time %s after arrival", r.Position, r.Flags, time.Duration(r.EventTime-r.IngestTime))
		}
	}
	st2 := in.Stats()
	da, _ := st2.Drone(1)
	db, _ := st2.Drone(2)
	if da.ClockSkew != uint64(len(recs["a"])) || db.ClockSkew != 0 || st2.Late != 0 {
		t.Fatalf("clock skew a %d (of %d) b %d, late %d", da.ClockSkew, len(recs["a"]), db.ClockSkew, st2.Late)
	}
}

// TestGPSTimeHourBehind: drone A's GPS time is an hour behind, drone
// B's is right. A's events are flagged clock-skew and do not hold the
// watermark back: it follows B, and B is never late.
func TestGPSTimeHourBehind(t *testing.T) {
	r := newSkewRig(t, watermark.Options{MaxClockSkew: 10 * time.Second, MaxClockBehind: 10 * time.Minute})
	in, st, tr, clk, c, wa, wb := r.in, r.st, r.tr, r.clk, r.c, r.wa, r.wb
	frames := 0
	var w watermark.Watermark
	var err error
	for i := range 40 {
		now := clk.Now()
		boot := uint32(10_000 + i*100)
		c.Write(wa.frame(t, &common.MessageSystemTime{TimeUnixUsec: uint64(now.Add(-time.Hour).UnixMicro()), TimeBootMs: boot}))
		c.Write(wa.frame(t, &common.MessageGlobalPositionInt{TimeBootMs: boot}))
		c.Write(wb.frame(t, &common.MessageSystemTime{TimeUnixUsec: uint64(now.UnixMicro()), TimeBootMs: boot}))
		c.Write(wb.frame(t, &common.MessageGlobalPositionInt{TimeBootMs: boot}))
		frames += 4
		testkit.WaitFor(t, 5*time.Second, "stored", func() bool { return in.Stats().Stored == uint64(frames) })
		if w, err = tr.Local(); err != nil {
			t.Fatal(err)
		}
		clk.Add(100 * time.Millisecond)
	}
	if behind := clk.Now().Sub(time.Unix(0, w.LowerNs)); w.LowerNs == 0 || behind > time.Minute {
		t.Fatalf("local watermark %s: %v behind the clock, held back by the drone an hour behind", w, behind)
	}
	recs := byDrone(t, st)
	for _, r := range recs["b"] {
		if r.Flags.Has(localstream.FlagLate) || r.Flags.Has(localstream.FlagClockSkew) {
			t.Fatalf("b's event %s flagged %b", r.Position, r.Flags)
		}
	}
	for _, r := range recs["a"] {
		if !r.Flags.Has(localstream.FlagClockSkew) {
			t.Fatalf("a's event %s, %v behind its arrival, not flagged clock-skew: flags %b", r.Position, time.Duration(r.IngestTime-r.EventTime), r.Flags)
		}
	}
	t.Logf("local watermark %v behind the clock", clk.Now().Sub(time.Unix(0, w.LowerNs)))
}
