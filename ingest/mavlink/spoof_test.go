package mavlink

import (
	"bytes"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/common"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestSpoofedGoodSysids: while two mapped drones send over TCP, an
// attacker on the same host sends well-formed frames with the good
// drones' own system ids at full rate over UDP. A system id is bound to
// the source that first sent it: the spoofed frames are counted and
// dropped, and each good drone's stream holds exactly its frames, byte
// for byte, in order, without a discontinuity the attacker made.
func TestSpoofedGoodSysids(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 7))
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.Drones = map[uint8]string{1: "good-1", 2: "good-2"}
	in, _ := runIntake(t, cfg, st, nil)
	good, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	w1, w2 := newWriter(t, false, 1, 1, nil), newWriter(t, true, 2, 1, nil)
	sent := map[string][][]byte{}
	send := func(i int) {
		for drone, w := range map[string]*gomavlibWriter{"good-1": w1, "good-2": w2} {
			f := w.frame(t, sampleMessages(i)[i%3])
			sent[drone] = append(sent[drone], f)
			if _, err := good.Write(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0) // the good drones bind their system ids first
	testkit.WaitFor(t, 5*time.Second, "the good drones' first frames", func() bool {
		d1, _ := in.Stats().Drone(1)
		d2, _ := in.Stats().Drone(2)
		return d1.Frames == 1 && d2.Frames == 1
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	spoofed := 0
	seed := rng.Uint64()
	wg.Go(func() {
		r := rand.New(rand.NewPCG(seed, 1))
		c := udpSender(t, in.UDPAddr())
		enc := DefaultDialect()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sys := uint8(1 + i%2)
			f, _ := enc.Encode(i%3 == 0, uint8(r.Uint32()), sys, uint8(1+r.IntN(2)), &common.MessageAttitude{TimeBootMs: uint32(i), Roll: r.Float32()})
			c.Write(f)
			spoofed++
		}
	})
	n := testkit.Rounds(1) * 2000
	for i := 1; i < n; i++ {
		send(i)
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // paced: the attack runs all along
		}
	}
	testkit.WaitFor(t, 30*time.Second, "good drones stored", func() bool {
		s := in.Stats()
		d1, _ := s.Drone(1)
		d2, _ := s.Drone(2)
		return d1.Stored >= uint64(n) && d2.Stored >= uint64(n)
	})
	time.Sleep(200 * time.Millisecond) // the attack goes on a little
	close(stop)
	wg.Wait()
	// Every spoofed datagram read, and every frame taken durable: a
	// spoofed frame let through would be in the store now.
	udp := in.UDPAddr().(*net.UDPAddr)
	testkit.WaitFor(t, 10*time.Second, "the socket read, the last batch durable", func() bool {
		if queued, _ := testkit.UDPQueue(t, udp); queued > 0 {
			return false
		}
		in.mu.Lock()
		defer in.mu.Unlock()
		for _, d := range in.slots.All() {
			if d.pending.Load() > 0 {
				return false
			}
		}
		return len(in.batch.evs) == 0
	})
	got := byDrone(t, st)
	for drone, fs := range sent {
		if len(got[drone]) != len(fs) {
			t.Fatalf("%s: %d stored, %d sent by the drone (%d spoofed frames sent)", drone, len(got[drone]), len(fs), spoofed)
		}
		for i, f := range fs {
			r := got[drone][i]
			if !bytes.Equal(r.Payload, f) {
				t.Fatalf("%s frame %d: stored % x, the drone sent % x", drone, i, r.Payload, f)
			}
			if r.Flags.Has(localstream.FlagDiscontinuity) != (i == 0) {
				t.Fatalf("%s frame %d: discontinuity %v", drone, i, i == 0)
			}
		}
	}
	s := in.Stats()
	d1, _ := s.Drone(1)
	d2, _ := s.Drone(2)
	t.Logf("%d spoofed frames sent; counted spoofed %d (good-1 %d, good-2 %d), rebinds %d", spoofed, s.Spoofed, d1.Spoofed, d2.Spoofed, s.Rebinds)
	if s.Spoofed == 0 || d1.Spoofed+d2.Spoofed != s.Spoofed || s.Rebinds != 0 || d1.Lost+d2.Lost != 0 {
		t.Fatalf("stats %+v: want every spoofed frame counted for the good drones, no rebind, nothing lost", s)
	}
}

// TestRebind: a system id bound to one source is taken over by another
// after RebindAfter of silence from the first (then the first is the
// spoofer), and at once when its TCP connection closes.
func TestRebind(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.RebindAfter = 300 * time.Millisecond
	in, _ := runIntake(t, cfg, st, nil)
	a, b := udpSender(t, in.UDPAddr()), udpSender(t, in.UDPAddr())
	w := newWriter(t, false, 5, 1, nil)
	send := func(c net.Conn) {
		if _, err := c.Write(w.frame(t, sampleMessages(0)[1])); err != nil {
			t.Fatal(err)
		}
	}
	drone := func() DroneStats { d, _ := in.Stats().Drone(5); return d }
	send(a)
	testkit.WaitFor(t, 5*time.Second, "bound to a", func() bool { return drone().Frames == 1 })
	send(b)
	testkit.WaitFor(t, 5*time.Second, "b spoofed", func() bool { return drone().Spoofed == 1 })
	time.Sleep(cfg.RebindAfter + 100*time.Millisecond) // the test's silence of a: longer than rebind_after
	send(b)
	testkit.WaitFor(t, 5*time.Second, "b takes over", func() bool { return drone().Rebinds == 1 && drone().Frames == 2 })
	send(a)
	testkit.WaitFor(t, 5*time.Second, "a now spoofed", func() bool { return drone().Spoofed == 2 })

	c1, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	w6 := newWriter(t, false, 6, 1, nil)
	c1.Write(w6.frame(t, sampleMessages(0)[1]))
	d6 := func() DroneStats { d, _ := in.Stats().Drone(6); return d }
	testkit.WaitFor(t, 5*time.Second, "bound to c1", func() bool { return d6().Frames == 1 })
	c1.Close() // the link redialled: the new connection takes over at once
	testkit.WaitFor(t, 5*time.Second, "c1 closed", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		d, _ := in.slots.Peek(6)
		return d.bind.Released()
	})
	c2, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write(w6.frame(t, sampleMessages(1)[1]))
	testkit.WaitFor(t, 5*time.Second, "c2 takes over", func() bool { return d6().Frames == 2 && d6().Rebinds == 1 && d6().Spoofed == 0 })
}
