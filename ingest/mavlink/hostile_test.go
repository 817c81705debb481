package mavlink

import (
	"bytes"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/common"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestHostileInput: while two mapped drones send over TCP, an attacker
// floods the UDP server for a while with garbage, oversized datagrams
// and well-formed frames of 10,000 (system id, component id, source)
// combinations — every system id but the good drones' — and opens more
// TCP connections than allowed, sending garbage on them. The good drones
// are stored complete, byte for byte, in order; every drop is counted;
// the discovered drones stay within MaxDrones and the heap bounded.
func TestHostileInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 1))
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.Drones = map[uint8]string{1: "good-1", 2: "good-2"}
	cfg.MaxDrones = 8
	cfg.MaxConnections = 4
	in, _ := runIntake(t, cfg, st, nil)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var attackMu sync.Mutex
	attackFrames, combos := 0, map[[3]int]bool{}
	for w := range 4 { // attackers from 4 source ports
		seed := rng.Uint64()
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			c := udpSender(t, in.UDPAddr())
			enc := DefaultDialect()
			junk := make([]byte, 60_000)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch i % 4 {
				case 0: // garbage, with magic bytes in it
					for k := range junk[:1500] {
						junk[k] = byte(r.Uint32())
					}
					junk[r.IntN(1400)] = magicV2
					c.Write(junk[:1500])
				case 1: // oversized: a datagram far beyond any frame, frames cut
					c.Write(junk)
				default: // spoofed system ids at full rate
					sys := uint8(3 + r.IntN(253))
					comp := uint8(r.IntN(256))
					f, _ := enc.Encode(false, uint8(i), sys, comp, &common.MessageAttitude{TimeBootMs: uint32(i)})
					c.Write(f)
					attackMu.Lock()
					attackFrames++
					combos[[3]int{int(sys), int(comp), w}] = true
					attackMu.Unlock()
				}
			}
		})
	}
	good, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	testkit.WaitFor(t, 5*time.Second, "the good connection accepted", func() bool { return in.Stats().Connections == 1 })
	var conns []net.Conn
	for range 12 { // more connections than MaxConnections, garbage on them
		c, err := net.Dial("tcp", in.TCPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	wg.Go(func() {
		junk := make([]byte, 4096)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, c := range conns { // beyond MaxConnections they are closed by the intake
				for k := range junk {
					junk[k] = byte(k * 7)
				}
				c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
				c.Write(junk)
			}
		}
	})

	w1, w2 := newWriter(t, false, 1, 1, nil), newWriter(t, true, 2, 1, nil)
	n := testkit.Rounds(1) * 2000
	sent := map[string][][]byte{}
	for i := range n {
		for drone, w := range map[string]*gomavlibWriter{"good-1": w1, "good-2": w2} {
			f := w.frame(t, sampleMessages(i)[i%3])
			sent[drone] = append(sent[drone], f)
			if _, err := good.Write(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.WaitFor(t, 30*time.Second, "good drones stored", func() bool {
		s := in.Stats()
		d1, _ := s.Drone(1)
		d2, _ := s.Drone(2)
		return d1.Stored == uint64(n) && d2.Stored == uint64(n)
	})
	testkit.WaitFor(t, 60*time.Second, "10,000 spoofed combinations sent", func() bool { // the attack goes on
		attackMu.Lock()
		defer attackMu.Unlock()
		return len(combos) >= 10_000
	})
	close(stop)
	wg.Wait()
	attackMu.Lock()
	t.Logf("attack: %d spoofed frames, %d (sysid, compid, source) combinations", attackFrames, len(combos))
	attackMu.Unlock()

	got := byDrone(t, st)
	for drone, fs := range sent {
		if len(got[drone]) != len(fs) {
			t.Fatalf("%s: %d stored, %d sent", drone, len(got[drone]), len(fs))
		}
		for i, f := range fs {
			if !bytes.Equal(got[drone][i].Payload, f) {
				t.Fatalf("%s frame %d differs", drone, i)
			}
		}
	}
	s := in.Stats()
	t.Logf("stats: frames %d stored %d garbage %d bad_crc %d unknown %d truncated %d over_limit %d refused %d drones %d",
		s.Frames, s.Stored, s.GarbageBytes, s.BadCRC, s.UnknownMessage, s.Truncated, s.DronesOverLimit, s.ConnectionsRefused, len(s.Drones))
	if len(s.Drones) > 2+cfg.MaxDrones || s.DronesOverLimit == 0 || s.GarbageBytes == 0 || s.Truncated == 0 || s.ConnectionsRefused == 0 {
		t.Fatalf("drops not counted: %+v", s)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 64<<20 {
		t.Fatalf("heap grew %d MiB under attack", grow>>20)
	}
}
