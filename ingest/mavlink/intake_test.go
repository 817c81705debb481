package mavlink

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/common"
	"github.com/bluenviron/gomavlib/v3/pkg/frame"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// byDrone groups the stored MAVLink frames by routing key, in store order.
func byDrone(t testing.TB, st *localstream.Stream) map[string][]localstream.Record {
	t.Helper()
	recs, err := st.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]localstream.Record{}
	for _, r := range recs {
		if r.ContentType != ContentType || r.Writer != WriterFor(r.RoutingKey) {
			t.Fatalf("record %s: content type %q writer %q", r.Position, r.ContentType, r.Writer)
		}
		out[r.RoutingKey] = append(out[r.RoutingKey], r)
	}
	return out
}

// TestByteExactInOrder: three drones (one mapped, two discovered; v1,
// v2 and signed v2, as gomavlib writes them) over TCP and UDP: every
// frame is stored byte for byte, per drone in the order sent, with its
// message and component id in headers.
func TestByteExactInOrder(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.Drones = map[uint8]string{1: "alpha"}
	in, _ := runIntake(t, cfg, st, nil)
	tcp, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp := udpSender(t, in.UDPAddr())
	key := frame.NewV2Key(bytes.Repeat([]byte{1}, 32))
	writers := map[string]*gomavlibWriter{"alpha": newWriter(t, false, 1, 1, nil),
		"mavlink-2": newWriter(t, true, 2, 1, nil), "mavlink-3": newWriter(t, false, 3, 190, key)}
	sent := map[string][][]byte{}
	const n = 300
	for i := range n {
		for drone, w := range writers {
			for _, m := range sampleMessages(i) {
				if drone == "mavlink-2" && m.GetID() > 255 {
					continue
				}
				f := w.frame(t, m)
				sent[drone] = append(sent[drone], f)
				if drone == "mavlink-3" {
					if _, err := udp.Write(f); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if _, err := tcp.Write(f); err != nil { // a stream: frames cut anywhere by the reads
					t.Fatal(err)
				}
			}
		}
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // UDP: no flood
		}
	}
	total := 0
	for _, fs := range sent {
		total += len(fs)
	}
	testkit.WaitFor(t, 10*time.Second, "every frame stored", func() bool { return in.Stats().Stored+in.Stats().Lost >= uint64(total) })
	if s := in.Stats(); s.Lost != 0 || s.GarbageBytes != 0 || s.BadCRC != 0 {
		t.Fatalf("stats %+v: lost or garbage on loopback", s)
	}
	got := byDrone(t, st)
	for drone, fs := range sent {
		if len(got[drone]) != len(fs) {
			t.Fatalf("%s: %d stored, %d sent", drone, len(got[drone]), len(fs))
		}
		for i, f := range fs {
			r := got[drone][i]
			if !bytes.Equal(r.Payload, f) {
				t.Fatalf("%s frame %d: stored % x, sent % x", drone, i, r.Payload, f)
			}
			fr, _, _ := split(f, DefaultDialect())
			if id, _ := r.Header(HeaderMsgID); id != fmt.Sprint(fr.MsgID) {
				t.Fatalf("%s frame %d: msgid header %q, want %d", drone, i, id, fr.MsgID)
			}
			if c, _ := r.Header(HeaderCompID); c != fmt.Sprint(fr.CompID) {
				t.Fatalf("%s frame %d: compid header %q", drone, i, c)
			}
			if r.Flags.Has(localstream.FlagDiscontinuity) != (i == 0) { // one component: its first frame starts a sequence
				t.Fatalf("%s frame %d: flagged discontinuity %v", drone, i, i == 0)
			}
		}
	}
}

// TestSequenceGapsCounted: frames a link lost (here: never sent) are
// counted per drone from the sequence numbers, and the frame after each
// gap is flagged discontinuity; a repeated frame is dropped.
func TestSequenceGapsCounted(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	in, _ := runIntake(t, localConfig(), st, nil)
	udp := udpSender(t, in.UDPAddr())
	w := newWriter(t, false, 5, 1, nil)
	var kept [][]byte
	wantLost, sentFrames := 0, 0
	var last []byte
	for i := range 600 { // 600 frames: the 8-bit sequence wraps twice
		f := w.frame(t, sampleMessages(i)[i%5])
		if i%50 == 7 || i%50 == 8 { // lost on the link
			wantLost++
			continue
		}
		if _, err := udp.Write(f); err != nil {
			t.Fatal(err)
		}
		sentFrames++
		kept = append(kept, f)
		last = f
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // UDP: no flood
		}
	}
	udp.Write(last) // a duplicate
	testkit.WaitFor(t, 10*time.Second, "frames stored", func() bool {
		s := in.Stats()
		return s.Stored == uint64(sentFrames) && s.Duplicates == 1
	})
	ds, _ := in.Stats().Drone(5)
	if ds.Lost != uint64(wantLost) || ds.Discontinuities != uint64(wantLost/2+1) || ds.Duplicates != 1 {
		t.Fatalf("drone stats %+v: want %d lost in %d gaps, 1 duplicate", ds, wantLost, wantLost/2)
	}
	recs := byDrone(t, st)["mavlink-5"]
	flagged := 0
	for i, r := range recs {
		if !bytes.Equal(r.Payload, kept[i]) {
			t.Fatalf("frame %d differs", i)
		}
		if r.Flags.Has(localstream.FlagDiscontinuity) && i > 0 {
			flagged++
			if recs[i-1].Payload[4]+1 == r.Payload[4] {
				t.Fatalf("frame %d flagged without a gap", i)
			}
		}
	}
	if flagged != wantLost/2 {
		t.Fatalf("%d events flagged discontinuity, want %d", flagged, wantLost/2)
	}
}

// fakeClock is a receiving clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestRates: ATTITUDE sampled to 10 Hz, every GLOBAL_POSITION_INT kept,
// HEARTBEAT dropped (rate 0); the drops are counted.
func TestRates(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	cfg.Now = clk.Now
	cfg.Rates = map[string]float64{"ATTITUDE": 10, "HEARTBEAT": 0}
	in, _ := runIntake(t, cfg, st, nil)
	c, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := newWriter(t, false, 4, 1, nil)
	const n = 100 // 2 s at 50 Hz
	for i := range n {
		msgs := sampleMessages(i)
		for _, m := range msgs[:3] {
			c.Write(w.frame(t, m))
		}
		// One read at a time: the clock moves 20 ms between them.
		testkit.WaitFor(t, 5*time.Second, "frames read", func() bool { return in.Stats().Frames == uint64(3*(i+1)) })
		clk.Add(20 * time.Millisecond)
	}
	testkit.WaitFor(t, 5*time.Second, "stored", func() bool { return in.Stats().Stored == n+n/5 })
	count := map[string]int{}
	for _, r := range byDrone(t, st)["mavlink-4"] {
		id, _ := r.Header(HeaderMsgID)
		count[id]++
	}
	if count["30"] != n/5 || count["33"] != n || count["0"] != 0 {
		t.Fatalf("stored per message id %v: want 20 ATTITUDE (30), 100 GLOBAL_POSITION_INT (33), no HEARTBEAT", count)
	}
	if s := in.Stats(); s.Sampled != n+n-n/5 {
		t.Fatalf("sampled %d, want %d", s.Sampled, n+n-n/5)
	}
}

// TestSigning: with a required key, unsigned frames, frames signed with
// another key and replayed frames are dropped and counted; good signed
// frames are stored; the key shows nowhere (stats, log).
func TestSigning(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	const pass = "s3cret-passphrase-for-signing"
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(pass+"\n"), 0o600)
	var logs strings.Builder
	var logMu sync.Mutex
	cfg := localConfig()
	cfg.Signing = SigningConfig{KeyFile: keyFile, Require: true}
	cfg.Logger = newTextLogger(&logs, &logMu)
	in, stop := runIntake(t, cfg, st, nil)
	c, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key, _ := parseKey(pass)
	otherKey, _ := parseKey("other")
	good := newWriter(t, false, 1, 1, frame.NewV2Key(key[:]))
	bad := newWriter(t, false, 1, 1, frame.NewV2Key(otherKey[:]))
	plain := newWriter(t, false, 1, 1, nil)
	var goodFrames [][]byte
	for i := range 50 {
		m := sampleMessages(i)[2]
		f := good.frame(t, m)
		goodFrames = append(goodFrames, f)
		c.Write(f)
		c.Write(bad.frame(t, m))
		c.Write(plain.frame(t, m))
		if i == 10 {
			c.Write(goodFrames[5]) // a replay
		}
		time.Sleep(time.Millisecond) // gomavlib's signature clock has 10 µs steps
	}
	testkit.WaitFor(t, 5*time.Second, "signed frames stored", func() bool {
		s := in.Stats()
		return s.Stored == 50 && s.BadSignature == 50 && s.Unsigned == 50 && s.SignatureReplayed == 1
	})
	recs := byDrone(t, st)["mavlink-1"]
	for i, r := range recs {
		if !bytes.Equal(r.Payload, goodFrames[i]) {
			t.Fatalf("stored frame %d is not the %dth good one", i, i)
		}
	}
	stop()
	logMu.Lock()
	defer logMu.Unlock()
	shown := fmt.Sprintf("%+v %v %s", in.Stats(), in, logs.String())
	for _, secret := range []string{pass, fmt.Sprintf("%x", key[:]), string(key[:8])} {
		if strings.Contains(shown, secret) {
			t.Fatalf("the key shows: %q", secret)
		}
	}
}

// TestEventTimeMapping: before a SYSTEM_TIME with GPS time, frames are
// timed at arrival (estimated); after it, SYSTEM_TIME is its own time and
// time_boot_ms messages are mapped onto it; a restart drops the mapping.
func TestEventTimeMapping(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	cfg.Now = clk.Now
	in, _ := runIntake(t, cfg, st, nil)
	c, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := newWriter(t, false, 6, 1, nil)
	gps := time.Unix(1_800_000_000, 0).Add(-2 * time.Second) // the drone's GPS clock, 2 s behind ours
	send := func(msgs ...any) {
		for _, m := range msgs {
			switch m := m.(type) {
			case *common.MessageAttitude:
				c.Write(w.frame(t, m))
			case *common.MessageSystemTime:
				c.Write(w.frame(t, m))
			}
		}
	}
	send(&common.MessageAttitude{TimeBootMs: 5000}) // before any mapping
	send(&common.MessageSystemTime{TimeUnixUsec: uint64(gps.UnixMicro()), TimeBootMs: 6000})
	send(&common.MessageAttitude{TimeBootMs: 6500})
	send(&common.MessageAttitude{TimeBootMs: 100}) // restarted
	testkit.WaitFor(t, 5*time.Second, "stored", func() bool { return in.Stats().Stored == 4 })
	recs := byDrone(t, st)["mavlink-6"]
	recv := clk.Now().UnixNano()
	want := []struct {
		t         int64
		estimated bool
	}{{recv, true}, {gps.UnixNano(), false}, {gps.Add(500 * time.Millisecond).UnixNano(), false}, {recv, true}}
	for i, w := range want {
		if recs[i].EventTime != w.t || recs[i].Flags.Has(localstream.FlagEstimatedTime) != w.estimated {
			t.Errorf("event %d: time %s estimated %v, want %s %v", i, time.Unix(0, recs[i].EventTime).UTC(),
				recs[i].Flags.Has(localstream.FlagEstimatedTime), time.Unix(0, w.t).UTC(), w.estimated)
		}
	}
}
