package video

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// dropSink takes the chunks and drops them: the packet path's own cost.
type dropSink struct{}

func (dropSink) Append(context.Context, localstream.Event, ...localstream.AppendOption) (localstream.Position, error) {
	return localstream.Position{}, nil
}

// packetRig is the RTP intake's path without sockets or a store: the
// router (probation, the SSRC's binding, the drones' table, the queue)
// and the drones that take what it queues (parse, reorder with the
// sequence window, depacketize, chunk), run in the caller's goroutine.
type packetRig struct {
	ctx    context.Context
	r      *router
	drones []*droneRun
	ticked time.Time
}

// start is the router's start of a drone, without its goroutine (the
// rig drains its queue).
func (g *packetRig) start(cfg *Config, id string, dc *DroneConfig) *droneRun {
	dr := &droneRun{dc: dc, ch: make(chan item, cfg.QueueDepth), evict: make(chan struct{})}
	dr.d = newDrone(id, cfg, dc, dropSink{}, nil, time.Now, nil)
	g.drones = append(g.drones, dr)
	return dr
}

// packet routes one datagram and has the drones take what it queued (the
// drones' ticks every 5 ms of arrival time, as runDrone's ticker).
// Callgrind counts this function (bench/callgrind-count.sh).
//
//go:noinline
func (g *packetRig) packet(b []byte, src netip.AddrPort, arrival time.Time) {
	g.r.dispatch(b, src, arrival, false)
	for _, dr := range g.drones {
		for len(dr.ch) > 0 {
			it := <-dr.ch
			g.r.queued.Add(-int64(len(it.b)))
			if it.rtcp {
				dr.d.rtcpPacket(g.ctx, it.b, it.arrival)
				continue
			}
			dr.d.queueDropped = it.dropped
			dr.d.rtp(g.ctx, it.b, it.arrival)
		}
	}
	if arrival.Sub(g.ticked) >= 5*time.Millisecond {
		for _, dr := range g.drones {
			dr.d.tick(g.ctx, arrival)
		}
		g.ticked = arrival
	}
}

// BenchmarkPacketPath is the RTP intake's CPU per packet without sockets
// or a store (packetRig): 20 drones, each the H.264 capture with its own
// SSRC and source port (RTCP muxed), interleaved packet by packet; one
// loop of the capture an iteration, continuing the numbers and times of
// the last. The ns/op is per packet.
func BenchmarkPacketPath(b *testing.B) {
	all, _, err := replay.ReadFile(testdata("h264.pcap"))
	if err != nil {
		b.Fatal(err)
	}
	pkts, _, _ := replay.Select(all)
	t0 := pkts[0].Time
	span := pkts[len(pkts)-1].Time.Sub(t0) + 33*time.Millisecond
	nRTP := 0
	var ts0, ts1 uint32
	for _, p := range pkts {
		if p.Kind == replay.RTP {
			if ts := binary.BigEndian.Uint32(p.Payload[4:8]); nRTP == 0 {
				ts0 = ts
			} else {
				ts1 = ts
			}
			nRTP++
		}
	}
	tsSpan := ts1 - ts0 + 3000
	cfg := testConfig()
	cfg.MaxDrones = 64
	g := &packetRig{ctx: context.Background()}
	g.r = benchRouter(&cfg, g)
	const streams = 20
	base := time.Now()
	packets := 0
	buf := make([]byte, 0, 2048)
	testkit.GrowStack(8)
	b.ResetTimer()
	for loop := 0; b.Loop(); loop++ {
		for _, p := range pkts {
			at := base.Add(time.Duration(loop)*span + p.Time.Sub(t0))
			for s := range streams {
				bb := append(buf[:0], p.Payload...)
				rewrite(bb, p.Kind, uint32(0x5000+s), loop, nRTP, tsSpan, span)
				g.packet(bb, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(20000+s)), at)
				packets++
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(packets), "ns/packet")
	b.ReportMetric(float64(len(pkts)*streams), "packets/op")
	var frames uint64
	for _, dr := range g.drones {
		s := dr.d.c.snapshot()
		if s.Lost != 0 || s.Malformed != 0 {
			b.Fatalf("%s: %+v", dr.d.id, s)
		}
		frames += s.FramesOut
	}
	if len(g.drones) != streams || frames == 0 {
		b.Fatalf("%d drones, %d frames", len(g.drones), frames)
	}
}

// benchRouter is the router with the rig's start.
func benchRouter(cfg *Config, g *packetRig) *router {
	return newRouter(cfg, &receiveCounters{}, func(id string, dr *droneRun) {
		started := g.start(cfg, id, dr.dc)
		dr.d, dr.ch, dr.evict = started.d, started.ch, started.evict
		g.drones[len(g.drones)-1] = dr
	})
}
