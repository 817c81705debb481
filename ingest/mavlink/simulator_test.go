package mavlink

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestSimulate: three simulated drones over UDP and one over TCP reach
// the intake whole: every frame stored, none lost, byte for byte the
// frames the simulator's Tap saw, in order, the six messages at
// their rates, and event times from SYSTEM_TIME once it came.
func TestSimulate(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	in, _ := runIntake(t, localConfig(), st, nil)
	ctx := context.Background()
	tapped := map[uint8][][]byte{}
	udp, err := Simulate(ctx, SimConfig{To: "udp://" + in.UDPAddr().String(), Drones: 3, Duration: 2 * time.Second,
		Tap: func(sysid uint8, f []byte) { tapped[sysid] = append(tapped[sysid], bytes.Clone(f)) }})
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := Simulate(ctx, SimConfig{To: "tcp://" + in.TCPAddr().String(), FirstSysID: 10, Duration: time.Second, V1: true})
	if err != nil {
		t.Fatal(err)
	}
	sent := udp.Frames + tcp.Frames
	testkit.WaitFor(t, 10*time.Second, "every simulated frame stored", func() bool { return in.Stats().Stored == uint64(sent) })
	if s := in.Stats(); s.Lost != 0 || len(s.Drones) != 4 {
		t.Fatalf("stats %+v: want 4 drones, nothing lost", s)
	}
	if n := len(tapped[1]) + len(tapped[2]) + len(tapped[3]); n != udp.Frames {
		t.Fatalf("tapped %d frames, sent %d", n, udp.Frames)
	}
	stored := byDrone(t, st)
	for sys := uint8(1); sys <= 3; sys++ {
		recs := stored[DiscoveredID(sys)]
		if len(recs) != len(tapped[sys]) {
			t.Fatalf("system %d: %d stored, %d tapped", sys, len(recs), len(tapped[sys]))
		}
		for i, r := range recs {
			if !bytes.Equal(r.Payload, tapped[sys][i]) {
				t.Fatalf("system %d frame %d: stored % x, tapped % x", sys, i, r.Payload, tapped[sys][i])
			}
		}
	}
	count := map[string]int{}
	for _, r := range stored["mavlink-1"] {
		id, _ := r.Header(HeaderMsgID)
		count[DefaultDialect().Name(uint32(atoiOr(id)))]++
	}
	if count["ATTITUDE"] < 50 || count["GLOBAL_POSITION_INT"] < 15 || count["HEARTBEAT"] < 1 || count["SYSTEM_TIME"] < 1 || count["SYS_STATUS"] < 3 || count["VFR_HUD"] < 10 {
		t.Fatalf("drone 1 sent %v in 2 s", count)
	}
	if d, _ := in.Stats().Drone(1); d.TimeMapped == 0 {
		t.Fatalf("drone 1: no event timed from SYSTEM_TIME: %+v", d)
	}
}

func atoiOr(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
