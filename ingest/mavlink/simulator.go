package mavlink

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/message"
	"github.com/bluenviron/gomavlib/v3/pkg/streamwriter"
)

// SimConfig configures Simulate.
type SimConfig struct {
	// To is udp://HOST:PORT (a socket per drone) or tcp://HOST:PORT (a
	// connection per drone). Required.
	To string
	// Drones is how many drones fly, system ids FirstSysID.. . Default 1.
	Drones int
	// FirstSysID is the first drone's system id. Default 1.
	FirstSysID uint8
	// Duration is how long they fly. Required.
	Duration time.Duration
	// V1 sends MAVLink 1 frames (default MAVLink 2).
	V1 bool
	// SigningKey signs MAVLink 2 frames with this 32-byte key (nil: unsigned).
	SigningKey []byte
	// GroundTime, when > 0, keeps each drone disarmed on the ground (its
	// HEARTBEAT's base_mode without MAV_MODE_FLAG_SAFETY_ARMED) for the
	// first and the last GroundTime of Duration: one flight, from arm to
	// disarm, in between.
	GroundTime time.Duration
	// Tap, when set, is given each frame as sent (its bytes valid during
	// the call), from Simulate's goroutine: for a check at the other end.
	Tap func(sysid uint8, frame []byte)
}

// SimResult says what Simulate sent.
type SimResult struct {
	// Frames sent, in all; Elapsed is how long it took.
	Frames  int
	Elapsed time.Duration
}

// simRates are the messages a simulated drone sends and how often, as an
// ArduPilot or PX4 telemetry link does at its usual stream rates: 50
// frames a second a drone.
var simRates = []struct {
	hz   float64
	make func(d *simDrone, t time.Duration) message.Message
}{
	{1, (*simDrone).heartbeat}, {2, (*simDrone).sysStatus}, {1, (*simDrone).systemTime},
	{10, (*simDrone).position}, {30, (*simDrone).attitude}, {6, (*simDrone).vfrHud},
}

// SimFramesPerSecond is how many frames one simulated drone sends a second.
const SimFramesPerSecond = 50

type simDrone struct {
	sysid uint8
	w     *streamwriter.Writer
	conn  io.WriteCloser
	boot  time.Time
	next  []time.Duration
	// ground and flight are SimConfig.GroundTime and Duration.
	ground, flight time.Duration
}

// Simulate flies cfg.Drones drones on circles for cfg.Duration, each
// sending HEARTBEAT (1 Hz), SYS_STATUS (2 Hz), SYSTEM_TIME (1 Hz, GPS
// time = now), GLOBAL_POSITION_INT (10 Hz), ATTITUDE (30 Hz) and VFR_HUD
// (6 Hz), encoded by gomavlib's frame writer, until the duration or ctx ends.
func Simulate(ctx context.Context, cfg SimConfig) (SimResult, error) {
	var res SimResult
	u, err := url.Parse(cfg.To)
	if err != nil || u.Host == "" || (u.Scheme != "udp" && u.Scheme != "tcp") {
		return res, fmt.Errorf("%w: simulate to %q: want udp://HOST:PORT or tcp://HOST:PORT", ErrConfig, cfg.To)
	}
	if cfg.Drones == 0 {
		cfg.Drones = 1
	}
	if cfg.FirstSysID == 0 {
		cfg.FirstSysID = 1
	}
	if cfg.Duration <= 0 || cfg.Drones < 0 || int(cfg.FirstSysID)+cfg.Drones-1 > 255 {
		return res, fmt.Errorf("%w: simulate: want a duration > 0 and system ids within 1..255", ErrConfig)
	}
	if cfg.SigningKey != nil && (len(cfg.SigningKey) != 32 || cfg.V1) {
		return res, fmt.Errorf("%w: simulate: a signing key is 32 bytes, for MAVLink 2", ErrConfig)
	}
	var drones []*simDrone
	defer func() {
		for _, d := range drones {
			d.conn.Close()
		}
	}()
	var key *frame.V2Key
	if cfg.SigningKey != nil {
		key = frame.NewV2Key(cfg.SigningKey)
	}
	for i := range cfg.Drones {
		c, err := simDial(ctx, u)
		if err != nil {
			return res, err
		}
		d := &simDrone{sysid: cfg.FirstSysID + uint8(i), conn: c, boot: time.Now().Add(-time.Duration(30+i) * time.Second),
			ground: cfg.GroundTime, flight: cfg.Duration}
		var bw io.Writer = c
		if cfg.Tap != nil {
			bw = tapWriter{c, d.sysid, cfg.Tap}
		}
		if d.w, err = newStreamWriter(bw, cfg.V1, d.sysid, 1, key); err != nil {
			return res, err
		}
		for k := range simRates { // spread the messages over the first period
			d.next = append(d.next, time.Duration(float64(time.Second)/simRates[k].hz*float64(k)/float64(len(simRates))))
		}
		drones = append(drones, d)
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			res.Elapsed = time.Since(start)
			return res, nil
		case now = <-tick.C:
		}
		t := now.Sub(start)
		if t >= cfg.Duration {
			res.Elapsed = time.Since(start)
			return res, nil
		}
		for _, d := range drones {
			for k, r := range simRates {
				for d.next[k] <= t {
					if err := d.w.Write(r.make(d, t)); err != nil {
						res.Elapsed = time.Since(start)
						return res, err
					}
					res.Frames++
					d.next[k] += time.Duration(float64(time.Second) / r.hz)
				}
			}
		}
	}
}

func (d *simDrone) bootMs() uint32 { return uint32(time.Since(d.boot).Milliseconds()) }

func (d *simDrone) angle(t time.Duration) float64 {
	return 2*math.Pi*t.Seconds()/60 + float64(d.sysid)
}

func (d *simDrone) heartbeat(t time.Duration) message.Message {
	// 217: custom mode, stabilize, guided, armed; 89 is the same disarmed.
	base, state := ardupilotmega.MAV_MODE_FLAG(217), ardupilotmega.MAV_STATE_ACTIVE
	if d.ground > 0 && (t < d.ground || t >= d.flight-d.ground) {
		base, state = 89, ardupilotmega.MAV_STATE_STANDBY
	}
	return &ardupilotmega.MessageHeartbeat{Type: ardupilotmega.MAV_TYPE_QUADROTOR, Autopilot: ardupilotmega.MAV_AUTOPILOT_ARDUPILOTMEGA,
		BaseMode: base, CustomMode: 5, SystemStatus: state, MavlinkVersion: 3}
}

func (d *simDrone) sysStatus(t time.Duration) message.Message {
	return &ardupilotmega.MessageSysStatus{VoltageBattery: uint16(16800 - min(4000, t.Milliseconds()/50)), CurrentBattery: 1250,
		BatteryRemaining: int8(max(5, 100-t.Seconds()/10)), Load: 310}
}

func (d *simDrone) systemTime(time.Duration) message.Message {
	return &ardupilotmega.MessageSystemTime{TimeUnixUsec: uint64(time.Now().UnixMicro()), TimeBootMs: d.bootMs()}
}

func (d *simDrone) position(t time.Duration) message.Message {
	a := d.angle(t)
	return &ardupilotmega.MessageGlobalPositionInt{TimeBootMs: d.bootMs(),
		Lat: int32(473977420 + 4500*math.Sin(a) + float64(d.sysid)*2000), Lon: int32(85455940 + 6700*math.Cos(a)),
		Alt: 508000, RelativeAlt: 20000, Vx: int16(785 * math.Cos(a)), Vy: int16(-785 * math.Sin(a)),
		Hdg: uint16(int(math.Mod(a*18000/math.Pi+36000, 36000)))}
}

func (d *simDrone) attitude(t time.Duration) message.Message {
	a := d.angle(t)
	return &ardupilotmega.MessageAttitude{TimeBootMs: d.bootMs(), Roll: 0.12, Pitch: -0.03 + 0.01*float32(math.Sin(a*8)),
		Yaw: float32(math.Mod(a, 2*math.Pi)), Yawspeed: float32(2 * math.Pi / 60)}
}

func (d *simDrone) vfrHud(t time.Duration) message.Message {
	return &ardupilotmega.MessageVfrHud{Airspeed: 7.9, Groundspeed: 7.85, Heading: int16(int(d.angle(t)*180/math.Pi) % 360),
		Throttle: 43, Alt: 508, Climb: 0}
}

// simDial opens a drone's link: a TCP connection, or an unconnected UDP
// socket (a radio link sends whether or not the agent is up; a connected
// one would fail on the ICMP errors meanwhile).
func simDial(ctx context.Context, u *url.URL) (io.WriteCloser, error) {
	if u.Scheme == "tcp" {
		return (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	}
	to, err := net.ResolveUDPAddr("udp", u.Host)
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	return udpLink{pc, to}, nil
}

// tapWriter hands each frame written (gomavlib's writer writes a frame
// in one call) to a tap once the link took it.
type tapWriter struct {
	w     io.Writer
	sysid uint8
	tap   func(uint8, []byte)
}

func (t tapWriter) Write(b []byte) (int, error) {
	n, err := t.w.Write(b)
	if err == nil {
		t.tap(t.sysid, b)
	}
	return n, err
}

type udpLink struct {
	pc *net.UDPConn
	to *net.UDPAddr
}

func (l udpLink) Write(b []byte) (int, error) { return l.pc.WriteToUDP(b, l.to) }
func (l udpLink) Close() error                { return l.pc.Close() }

// newStreamWriter is gomavlib's message writer on w: frames of version 1 or
// 2 from sysid/compid, signed with key when it is not nil.
func newStreamWriter(w io.Writer, v1 bool, sysid, compid uint8, key *frame.V2Key) (*streamwriter.Writer, error) {
	ver := streamwriter.V2
	if v1 {
		ver = streamwriter.V1
	}
	fw := &frame.Writer{ByteWriter: w, DialectRW: DefaultDialect().rw}
	if err := fw.Initialize(); err != nil {
		return nil, err
	}
	sw := &streamwriter.Writer{FrameWriter: fw, Version: ver, SystemID: sysid, ComponentID: compid, Key: key}
	if err := sw.Initialize(); err != nil {
		return nil, err
	}
	return sw, nil
}
