// Command mktlog writes flight.tlog with gomavlib's tlog writer
// (github.com/bluenviron/gomavlib/v3/pkg/tlog): two simulated vehicles on
// one link — system 1 (MAVLink 2, ArduCopter-like) and system 2 (MAVLink
// 1) — flying circles for 20 s, each sending HEARTBEAT and SYS_STATUS at
// 1 Hz, SYSTEM_TIME at 1 Hz, GLOBAL_POSITION_INT at 10 Hz, ATTITUDE at
// 20 Hz and VFR_HUD at 4 Hz, timestamped as a GCS receiving them from
// 2026-06-01T12:00:00Z with a few ms of link jitter. Nothing of
// edge-agent encodes a frame or an entry here. Run from the repository root:
//
//	go run ./testdata/mavlink/mktlog > testdata/mavlink/flight.tlog
package main

import (
	"log"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialect"
	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/message"
	"github.com/bluenviron/gomavlib/v3/pkg/tlog"
)

type planned struct {
	at  time.Duration
	sys uint8
	msg message.Message
}

func main() {
	rw, err := dialect.NewReadWriter(ardupilotmega.Dialect)
	if err != nil {
		log.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2026, 6))
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const flight = 20 * time.Second
	var plan []planned
	every := func(sys uint8, period time.Duration, phase time.Duration, mk func(t time.Duration) message.Message) {
		for t := phase; t < flight; t += period {
			plan = append(plan, planned{t + time.Duration(rng.IntN(4000))*time.Microsecond, sys, mk(t)})
		}
	}
	for _, sys := range []uint8{1, 2} {
		boot := time.Duration(sys) * 37 * time.Second // time since the vehicle booted at the log's start
		bootMs := func(t time.Duration) uint32 { return uint32((boot + t).Milliseconds()) }
		angle := func(t time.Duration) float64 { return 2 * math.Pi * t.Seconds() / 40 }
		every(sys, time.Second, 0, func(t time.Duration) message.Message {
			return &ardupilotmega.MessageHeartbeat{Type: 2, Autopilot: 3, BaseMode: 217, CustomMode: 5, SystemStatus: 4, MavlinkVersion: 3}
		})
		every(sys, time.Second, 10*time.Millisecond, func(t time.Duration) message.Message {
			return &ardupilotmega.MessageSysStatus{VoltageBattery: uint16(16800 - t.Milliseconds()/20), CurrentBattery: 1250,
				BatteryRemaining: int8(95 - t.Seconds()/4), Load: 310, DropRateComm: 0}
		})
		every(sys, time.Second, 20*time.Millisecond, func(t time.Duration) message.Message {
			return &ardupilotmega.MessageSystemTime{TimeUnixUsec: uint64(start.Add(t).UnixMicro()), TimeBootMs: bootMs(t)}
		})
		every(sys, 100*time.Millisecond, 30*time.Millisecond, func(t time.Duration) message.Message {
			a := angle(t)
			return &ardupilotmega.MessageGlobalPositionInt{TimeBootMs: bootMs(t),
				Lat: int32(473977420+4500*math.Sin(a)) + int32(sys)*1000, Lon: int32(85455940 + 6700*math.Cos(a)),
				Alt: 508000, RelativeAlt: 20000, Vx: int16(785 * math.Cos(a)), Vy: int16(-785 * math.Sin(a)), Hdg: uint16(int(math.Mod(a*18000/math.Pi+36000, 36000)))}
		})
		every(sys, 50*time.Millisecond, 40*time.Millisecond, func(t time.Duration) message.Message {
			return &ardupilotmega.MessageAttitude{TimeBootMs: bootMs(t), Roll: 0.12, Pitch: -0.03 + 0.01*float32(math.Sin(angle(t)*8)),
				Yaw: float32(math.Mod(angle(t), 2*math.Pi)), Yawspeed: float32(2 * math.Pi / 40)}
		})
		every(sys, 250*time.Millisecond, 45*time.Millisecond, func(t time.Duration) message.Message {
			return &ardupilotmega.MessageVfrHud{Airspeed: 7.9, Groundspeed: 7.85, Heading: int16(int(angle(t)*180/math.Pi) % 360),
				Throttle: 43, Alt: 508, Climb: 0}
		})
	}
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].at < plan[j].at })
	w := &tlog.Writer{ByteWriter: os.Stdout, DialectRW: rw}
	if err := w.Initialize(); err != nil {
		log.Fatal(err)
	}
	seq := map[uint8]uint8{}
	for _, p := range plan {
		mp := rw.GetMessage(p.msg.GetID())
		var fr frame.Frame
		if p.sys == 2 {
			f := &frame.V1Frame{SequenceNumber: seq[p.sys], SystemID: p.sys, ComponentID: 1, Message: mp.Write(p.msg, false)}
			f.Checksum = f.GenerateChecksum(mp.CRCExtra())
			fr = f
		} else {
			f := &frame.V2Frame{SequenceNumber: seq[p.sys], SystemID: p.sys, ComponentID: 1, Message: mp.Write(p.msg, true)}
			f.Checksum = f.GenerateChecksum(mp.CRCExtra())
			fr = f
		}
		seq[p.sys]++
		if err := w.Write(&tlog.Entry{Time: start.Add(p.at), Frame: fr}); err != nil {
			log.Fatal(err)
		}
	}
}
