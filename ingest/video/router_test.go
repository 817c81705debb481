package video

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestDroneSlots: the drones' table is guard.Table's. With max_drones 2
// held by two live discovered drones, a third discovered drone is refused
// (too_many_drones) while a configured one starts at once, in no slot;
// once evict_idle has passed, the third takes the slot of the drone
// silent the longest, which is unbound and told to close (evicted), and
// the configured one never is.
func TestDroneSlots(t *testing.T) {
	cfg := testConfig()
	cfg.MaxDrones, cfg.EvictIdle = 2, time.Second
	cfg.Drones = []DroneConfig{{ID: "configured", SSRC: 0xc0}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rc := &receiveCounters{}
	r := newRouter(&cfg, rc, func(id string, dr *droneRun) {
		dr.d, dr.ch, dr.evict = newDrone(id, &cfg, dr.dc, &recordSink{}, nil, time.Now, nil), make(chan item, 64), make(chan struct{})
	})
	t0 := time.Unix(1_800_000_000, 0)
	send := func(ssrc uint32, port uint16, at time.Time) {
		for seq := range uint16(probationPackets) {
			b := make([]byte, 12+4)
			b[0], b[1] = 0x80, 96
			binary.BigEndian.PutUint16(b[2:], seq)
			binary.BigEndian.PutUint32(b[8:], ssrc)
			r.dispatch(b, netip.AddrPortFrom(netipLoopback.Addr(), port), at, false)
		}
	}
	running := func(id string) *droneRun { dr, _ := r.byID.Peek(id); return dr }
	send(0xa, 1, t0)
	send(0xb, 2, t0.Add(100*time.Millisecond))
	send(0xd, 3, t0.Add(500*time.Millisecond))
	send(0xc0, 4, t0.Add(500*time.Millisecond))
	if rc.tooManyDrones.Load() != 1 || running(ssrcID(0xd)) != nil {
		t.Fatalf("a third discovered drone among 2 live ones: refused %d, running %v", rc.tooManyDrones.Load(), running(ssrcID(0xd)) != nil)
	}
	if running("configured") == nil || r.byID.Counted() != 2 || r.byID.Len() != 3 {
		t.Fatalf("configured drone running %v; %d in slots, %d running", running("configured") != nil, r.byID.Counted(), r.byID.Len())
	}
	first := running(ssrcID(0xa))
	send(0xd, 3, t0.Add(1100*time.Millisecond)) // 0xa silent for 1.1 s, 0xb for 1 s: both idle
	if running(ssrcID(0xd)) == nil || running(ssrcID(0xa)) != nil || running(ssrcID(0xb)) == nil || rc.evicted.Load() != 1 {
		t.Fatalf("after evict_idle: newcomer running %v, silent-longest running %v, evicted %d", running(ssrcID(0xd)) != nil, running(ssrcID(0xa)) != nil, rc.evicted.Load())
	}
	select {
	case <-first.evict:
	default:
		t.Fatal("the evicted drone was not told to close")
	}
	if r.bySSRC[0xa] != nil || running("configured") == nil {
		t.Fatal("the evicted drone's SSRC still maps to it, or the configured drone lost its place")
	}
}

// ssrcID is a discovered drone's id.
func ssrcID(ssrc uint32) string { return fmt.Sprintf("ssrc-%08x", ssrc) }
