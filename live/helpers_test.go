package live

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

var quiet = slog.New(slog.DiscardHandler)

// rng fills video frames (not a test's randomness: any bytes do).
var (
	rngMu sync.Mutex
	rng   = rand.NewChaCha8([32]byte{28})
)

// station is a ground station in a test: a real Badger store with
// telemetry and video streams and their watermark trackers, replicated
// through a linkProxy to an embedded JetStream centre, with or without
// the live lane.
type station struct {
	t        testing.TB
	agent    string
	store    *localstream.Store
	streams  map[string]*localstream.Stream
	trackers map[string]*watermark.Tracker
	centre   *central.Server
	proxy    *linkProxy
	reader   *nats.Conn // straight to the centre: the consumer

	nc     *nats.Conn
	sink   *replicate.JetStreamSink
	repl   *replicate.Replication
	lane   *Lane
	cancel context.CancelFunc
	done   chan struct{}
	// stopLane stops the lane alone and waits for it.
	stopLane func()
}

type stationOpts struct {
	dir       string // store directory (default: a new temp dir)
	centreDir string
	capBps    int64 // the agent's uplink cap (0: none)
	proxyBps  int   // the link's rate (0: uncapped)
	lane      bool
	// onWire charges the cap on the wire, as the agent does
	// (Uplink.Dialer); else with what each event asks for.
	onWire bool
	live   Config
}

func newStation(t testing.TB, o stationOpts) *station {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	s := &station{t: t, agent: "a1", streams: map[string]*localstream.Stream{}, trackers: map[string]*watermark.Tracker{}}
	store, err := localstream.Open(o.dir, localstream.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.store = store
	t.Cleanup(func() { store.Close() })
	for _, name := range []string{"telemetry", "video"} {
		st, err := store.CreateStream(name, localstream.StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := watermark.NewTracker(st, store, watermark.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		s.streams[name], s.trackers[name] = st, tr
	}
	if o.centreDir == "" {
		o.centreDir = t.TempDir()
	}
	srv, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: o.centreDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	s.centre = srv
	s.proxy = newLinkProxy(t, srv.ClientURL()[len("nats://"):], o.proxyBps)
	s.reader = dial(t, srv.ClientURL())
	return s
}

// dial connects the way the agent does.
func dial(t testing.TB, url string) *nats.Conn {
	t.Helper()
	return dialVia(t, url, nil)
}

// dialVia is dial through d (nil: a plain dialer).
func dialVia(t testing.TB, url string, d nats.CustomDialer) *nats.Conn {
	t.Helper()
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: []string{url}, IgnoreDiscoveredServers: true, Dialer: d}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// start runs replication (and the lane) through the proxy.
func (s *station) start(o stationOpts) {
	t := s.t
	t.Helper()
	up := replicate.NewUplink(o.capBps)
	var d nats.CustomDialer
	if o.onWire {
		d = up.Dialer(nil)
	}
	s.nc = dialVia(t, s.proxy.URL(), d)
	inst := replicate.NewInstanceID()
	sink, err := replicate.NewJetStreamSink(s.nc, s.agent, inst, replicate.JetStreamOptions{Layout: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.sink = sink
	s.repl = replicate.NewReplication(s.store, sink, replicate.ReplicationConfig{Instance: inst, Uplink: up,
		Streams: []string{"telemetry", "video"}, Logger: quiet,
		Watermarks: func(name string) replicate.CommittedWatermarkFunc {
			return replicate.TrackerWatermark(s.trackers[name], nil)
		}})
	if o.lane {
		cfg := o.live
		if cfg.Streams == nil {
			cfg = NewDefaultConfig()
		}
		s.lane, err = New(s.agent, []*localstream.Stream{s.streams["telemetry"], s.streams["video"]}, cfg,
			Options{Conn: sink.Conn, Uplink: up, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	lctx, lcancel := context.WithCancel(ctx)
	ld := make(chan struct{})
	go func() {
		defer close(ld)
		if s.lane != nil {
			s.lane.Run(lctx)
		}
	}()
	s.stopLane = func() { lcancel(); <-ld }
	go func() {
		defer close(s.done)
		s.repl.Run(ctx)
		s.stopLane()
	}()
	t.Cleanup(s.stop)
}

func (s *station) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
		s.cancel = nil
		s.sink.Close()
		s.nc.Close()
	}
}

// telemetryEvent is drone's position report number i at time ns.
func telemetryEvent(drone string, i int, ns int64) localstream.Event {
	a := float64(i) / 600
	return localstream.Event{RoutingKey: drone, Writer: "telemetry/" + drone, EventTime: ns, IngestTime: ns,
		ContentType: "application/json",
		Headers:     []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + drone + "/telemetry"}},
		Payload: fmt.Appendf(nil, `{"drone":%q,"seq":%d,"time_ns":%d,"lat":%.6f,"lon":%.6f,"alt":%.1f,"heading":%.1f,"speed":%.1f,"battery":%.1f}`,
			drone, i, ns, 48.85+0.01*math.Sin(a), 2.35+0.01*math.Cos(a), 120+10*math.Sin(a), math.Mod(float64(i), 360), 12.5, 100-float64(i)/1000)}
}

// appendGroup appends evs durably as one group and notes each one's time
// with its writer (telemetry: the event time is the mark).
func (s *station) appendGroup(ctx context.Context, stream string, evs []localstream.Event) error {
	done := make(chan error, 1)
	var pos []localstream.Position
	if err := s.streams[stream].AppendGroupAsync(ctx, evs, func(p []localstream.Position, err error) { pos = p; done <- err }); err != nil {
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	for i, ev := range evs {
		if err := s.trackers[stream].Note(ev.Writer, ev.EventTime, pos[i]); err != nil {
			return err
		}
	}
	return nil
}

// videoEvent is a one-second chunk of drone's video at time ns: a
// keyframe of keyBytes then 29 frames of frameBytes (H.264 Annex-B
// shaped, the rest random: as incompressible as coded video; the lane
// does not decode the pictures).
func videoEvent(drone string, ns int64, keyBytes, frameBytes int) localstream.Event {
	c := &video.Chunk{Codec: video.CodecH264, SSRC: 0x1234}
	for i := range 30 {
		n := frameBytes
		if i == 0 {
			n = keyBytes
		}
		f := make([]byte, n)
		rngMu.Lock()
		rng.Read(f)
		rngMu.Unlock()
		copy(f, []byte{0, 0, 0, 1, 0x65})
		c.Payload = append(c.Payload, f...)
		c.Frames = append(c.Frames, video.FrameInfo{PTS: ns + int64(i)*int64(time.Second)/30, Size: n, Key: i == 0})
	}
	return c.Event(drone, ns)
}

// appendNoted appends ev durably and notes its time with its writer.
func (s *station) appendNoted(ctx context.Context, stream string, ev localstream.Event) {
	s.t.Helper()
	if err := s.append(ctx, stream, ev); err != nil {
		s.t.Fatal(err)
	}
}

// append is appendNoted returning its error (for other goroutines).
func (s *station) append(ctx context.Context, stream string, ev localstream.Event) error {
	pos, err := s.streams[stream].Append(ctx, ev)
	if err != nil {
		return err
	}
	mark := ev.EventTime
	if stream == "video" {
		if c, err := video.DecodeChunk(ev); err == nil {
			mark = c.Frames[len(c.Frames)-1].PTS
		}
	}
	return s.trackers[stream].Note(ev.Writer, mark, pos)
}

// fleet is the drones of the time-to-live-view scenario: telemetry drones
// reporting at 10 Hz, video drones sending a one-second chunk a second
// (a 20 KB keyframe and 29 frames of 1.5 KB: about 0.5 Mbit/s).
type fleet struct {
	telemetry, video []string
	seq              map[string]int
}

func newFleet(tel, vid int) *fleet {
	f := &fleet{seq: map[string]int{}}
	for i := range tel {
		f.telemetry = append(f.telemetry, fmt.Sprintf("tel-%d", i+1))
	}
	for i := range vid {
		f.video = append(f.video, fmt.Sprintf("vid-%d", i+1))
	}
	return f
}

// emitter takes one of the fleet's events into a local stream (the
// station's store, or the leaf's edge streams).
type emitter func(ctx context.Context, stream string, ev localstream.Event) error

// tick emits the fleet's events of the 100 ms step at ns (video on
// whole seconds).
func (f *fleet) tick(ctx context.Context, emit emitter, ns int64, second bool) error {
	for _, d := range f.telemetry {
		f.seq[d]++
		if err := emit(ctx, "telemetry", telemetryEvent(d, f.seq[d], ns)); err != nil {
			return err
		}
	}
	if !second {
		return nil
	}
	for _, d := range f.video {
		if err := emit(ctx, "video", videoEvent(d, ns, 20<<10, 1536)); err != nil {
			return err
		}
	}
	return nil
}

// capture appends d of the fleet's events ending at end, as fast as the
// store takes them (a capture replayed at full speed).
func (f *fleet) capture(ctx context.Context, emit emitter, d time.Duration, end time.Time) error {
	step := int64(100 * time.Millisecond)
	n := int(d / time.Duration(step))
	for i := range n {
		ns := end.UnixNano() - int64(n-i)*step
		if err := f.tick(ctx, emit, ns, i%10 == 0); err != nil {
			return err
		}
	}
	return nil
}

// fly appends the fleet's events in real time until ctx ends.
func (f *fleet) fly(ctx context.Context, emit emitter) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		if err := f.tick(ctx, emit, time.Now().UnixNano(), i%10 == 0); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// envInt is an integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
