package agent

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/ingest/video"
)

// Issue 30 cases 3 and 7 in the hostile-neighbours run.
func init() {
	neighbourPhases = append(neighbourPhases,
		neighbourPhase{
			// 30.3: another host speaks for the good video drones' SSRCs
			// (printed on the status page): 2,000 RTP packets a second
			// with random sequence numbers, times and payloads, and
			// sender reports dated an hour ahead every 0.2 s. The SSRCs
			// are bound to the drones' sources: counted, dropped; the
			// run's end checks that every good frame is stored.
			name: "ssrc-spoof", attack: attackSpoofSSRC,
			check: func(tb testing.TB, r *neighbourRig, _ telemetry.Stats, vid video.Stats) {
				for _, ssrc := range []uint32{0x600d0001, 0x600d0002} {
					ds := vid.PerDrone[goodVideoID(ssrc)]
					if ds.Spoofed == 0 || ds.ClockJumps != 0 || ds.SSRCChanges != 0 || ds.SRSkewed != 0 {
						tb.Fatalf("good video drone %s under spoofing: %+v", goodVideoID(ssrc), ds)
					}
				}
			},
		},
		neighbourPhase{
			// 30.7: 200 local connections to the HTTP listener send
			// their headers a byte every 200 ms and are reopened as
			// they close (slowloris): /healthz must answer every probe
			// (a probe's transport error reads `Get "…`).
			name: "http-slowloris", attack: attackSlowloris, healthNot: `Get "`,
			check: func(tb testing.TB, r *neighbourRig, _ telemetry.Stats, _ video.Stats) {
				if n := slowlorisOpened.Swap(0); n < 200 {
					tb.Fatalf("the slowloris opened only %d connections", n)
				}
			},
		},
	)
}

// attackSpoofSSRC sends spoofed RTP and sender reports for the good video
// drones' SSRCs from its own socket until stop is closed.
func attackSpoofSSRC(tb testing.TB, r *neighbourRig, stop <-chan struct{}) {
	dst, err := net.ResolveUDPAddr("udp", r.rtp)
	if err != nil {
		tb.Error(err)
		return
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Error(err)
		return
	}
	defer conn.Close()
	rng := rand.New(rand.NewPCG(r.seed, 30_3))
	pkt := make([]byte, 1200)
	sr := make([]byte, 28)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for _, ssrc := range []uint32{0x600d0001, 0x600d0002} {
			for j := 0; j < 10; j++ { // 2 × 10 per 10 ms: 2,000 a second
				for k := range pkt {
					pkt[k] = byte(rng.Uint32())
				}
				pkt[0], pkt[1] = 0x80, 96|byte(rng.IntN(2))<<7
				binary.BigEndian.PutUint32(pkt[8:12], ssrc)
				conn.WriteToUDP(pkt, dst)
			}
			if i%20 == 0 { // every 0.2 s a report dated an hour ahead
				sr[0], sr[1] = 0x80, 200
				binary.BigEndian.PutUint16(sr[2:4], 6)
				binary.BigEndian.PutUint32(sr[4:8], ssrc)
				ntp := uint64(time.Now().Add(time.Hour).Unix()+2208988800) << 32
				binary.BigEndian.PutUint64(sr[8:16], ntp)
				binary.BigEndian.PutUint32(sr[16:20], rng.Uint32())
				conn.WriteToUDP(sr, dst)
			}
		}
	}
}

// slowlorisOpened counts the slowloris's connections (checked and reset
// by its phase).
var slowlorisOpened atomic.Int64

// attackSlowloris holds 200 connections to the HTTP listener that never
// finish their headers, reopening each as it closes, until stop is closed.
func attackSlowloris(tb testing.TB, r *neighbourRig, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", r.a.HTTPAddr(), time.Second)
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the attacker's back-off
					continue
				}
				slowlorisOpened.Add(1)
			slow:
				for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ") {
					if _, err := c.Write([]byte{b}); err != nil {
						break
					}
					select {
					case <-stop:
						break slow
					case <-time.After(200 * time.Millisecond):
					}
				}
				c.Close()
			}
		})
	}
	wg.Wait()
}
