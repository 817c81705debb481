package mavlink

import (
	"bytes"
	"log/slog"
	"net"
	"strconv"
	"testing"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/bluenviron/gomavlib/v3/pkg/dialects/common"
	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/message"
	"github.com/bluenviron/gomavlib/v3/pkg/streamwriter"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// openStore opens a real Badger store and its telemetry stream.
func openStore(t testing.TB, dir string) (*localstream.Store, *localstream.Stream) {
	t.Helper()
	return rigs.OpenStream(t, dir, localstream.Options{}, "telemetry", localstream.StreamConfig{})
}

// runIntake starts an intake; the returned function stops it and returns Run's error.
func runIntake(t testing.TB, cfg Config, st Appender, marks telemetry.Marks) (*Intake, func() error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	in, err := New(cfg, Sink{Stream: st, Marks: marks})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Bind(); err != nil {
		t.Fatal(err)
	}
	return in, testkit.Run(t, in.Run, in.Ready())
}

func localConfig() Config {
	cfg := NewDefaultConfig()
	cfg.UDPListen, cfg.TCPListen = "127.0.0.1:0", "127.0.0.1:0"
	return cfg
}

// gomavlibWriter is gomavlib's own frame writer (not this package's
// code) writing to a buffer: frames made by it are what a real sender sends.
type gomavlibWriter struct {
	buf bytes.Buffer
	w   *streamwriter.Writer
}

func newWriter(t testing.TB, v1 bool, sysid, compid uint8, key *frame.V2Key) *gomavlibWriter {
	t.Helper()
	g := &gomavlibWriter{}
	var err error
	if g.w, err = newStreamWriter(&g.buf, v1, sysid, compid, key); err != nil {
		t.Fatal(err)
	}
	return g
}

// frame writes msg and returns the frame's bytes.
func (g *gomavlibWriter) frame(t testing.TB, msg message.Message) []byte {
	t.Helper()
	g.buf.Reset()
	if err := g.w.Write(msg); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), g.buf.Bytes()...)
}

// sampleMessages are one of each message a drone sends most.
func sampleMessages(i int) []message.Message {
	return []message.Message{
		&ardupilotmega.MessageHeartbeat{Type: 2, Autopilot: 3, BaseMode: 81, CustomMode: uint32(i), SystemStatus: 4, MavlinkVersion: 3},
		&common.MessageAttitude{TimeBootMs: uint32(1000 + i*20), Roll: 0.1, Pitch: -0.2, Yaw: float32(i) / 100},
		&common.MessageGlobalPositionInt{TimeBootMs: uint32(1000 + i*20), Lat: 473977420 + int32(i), Lon: 85455940, Alt: 488000, RelativeAlt: 10000},
		&common.MessageVfrHud{Airspeed: 12, Groundspeed: 11.5, Heading: 90, Throttle: 40, Alt: 488, Climb: 0.1},
		&common.MessageStatustext{Severity: 6, Text: "edge " + strconv.Itoa(i)},
	}
}

// udpSender is a client socket to the intake's UDP server.
func udpSender(t testing.TB, addr net.Addr) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, addr.(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
