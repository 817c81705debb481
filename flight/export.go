package flight

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/foxglove/mcap/go/mcap"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
)

// ExportOptions select a flight and how its record is written.
type ExportOptions struct {
	FindOptions
	// N is the flight's number (Find); 0: the range FromNs..ToNs.
	N int
	// FromNs and ToNs bound a user's range (event times, Unix ns).
	FromNs, ToNs int64
	// Key signs the certificate. Required.
	Key ed25519.PrivateKey
	// Tlog, when set, also receives the flight's MAVLink frames as a tlog.
	Tlog io.Writer
	// Now is the clock of CreatedNs (default time.Now).
	Now func() time.Time
	// Compression is the chunks' zstd level (default: fastest).
	Compression mcap.CompressionLevel
}

// Result is what Export wrote.
type Result struct {
	Certificate Certificate
	// SHA256 is the record file's hash; Bytes its size.
	SHA256 [32]byte
	Bytes  int64
}

// Resolve returns the flight ExportOptions name: flight N of Find, or the
// user's range with the agent that captured the drone then.
func Resolve(ctx context.Context, nc *nats.Conn, o ExportOptions) (Flight, error) {
	if err := o.FindOptions.setDefaults(); err != nil {
		return Flight{}, err
	}
	if o.N > 0 {
		fl, err := Find(ctx, nc, o.FindOptions)
		if err != nil {
			return Flight{}, err
		}
		if o.N > len(fl) {
			return Flight{}, fmt.Errorf("%w: drone %s has %d flights at the centre, not %d", ErrNoFlight, o.Drone, len(fl), o.N)
		}
		return fl[o.N-1], nil
	}
	if o.ToNs <= o.FromNs {
		return Flight{}, fmt.Errorf("%w: a flight number, or a range with from < to", ErrConfig)
	}
	f := Flight{Drone: o.Drone, Agent: o.Agent, StartNs: o.FromNs, EndNs: o.ToNs, Rule: "range"}
	if f.Agent != "" {
		return f, nil
	}
	for _, s := range []string{o.Streams.Telemetry, o.Streams.Video} {
		agents, err := agentsIn(ctx, nc, s, o.Drone, o.FromNs, o.ToNs)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return Flight{}, fmt.Errorf("flight: read %s: %w", s, err)
		}
		switch {
		case len(agents) > 1:
			return Flight{}, fmt.Errorf("%w: %s (name one with --agent)", ErrSeveralAgents, strings.Join(agents, ", "))
		case len(agents) == 1:
			f.Agent = agents[0]
			return f, nil
		}
	}
	return Flight{}, fmt.Errorf("%w: drone %s has no events at the centre in that range", ErrNoFlight, o.Drone)
}

// Export writes flight's record to w and returns its certificate.
func Export(ctx context.Context, nc *nats.Conn, f Flight, o ExportOptions, w io.Writer) (Result, error) {
	if err := o.FindOptions.setDefaults(); err != nil {
		return Result{}, err
	}
	if o.Key == nil {
		return Result{}, fmt.Errorf("%w: a signing key is required", ErrConfig)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Compression == 0 {
		o.Compression = mcap.CompressionLevelFastest
	}
	hw := &hashingWriter{w: w, h: sha256.New()}
	rw, err := newRecordWriter(hw, o.Compression)
	if err != nil {
		return Result{}, err
	}
	x, err := newExporter(ctx, nc, f, o, rw)
	if err != nil {
		return Result{}, err
	}
	defer x.close(context.WithoutCancel(ctx))
	if err := x.run(ctx); err != nil {
		return Result{}, err
	}
	cert := x.certificate(o.Now().UnixNano())
	if err := cert.sign(o.Key); err != nil {
		return Result{}, err
	}
	cb, err := json.MarshalIndent(cert, "", "  ")
	if err != nil {
		return Result{}, err
	}
	meta := map[string]string{"drone": f.Drone, "agent": f.Agent, "flight": strconv.Itoa(f.N), "rule": f.Rule,
		"start": time.Unix(0, f.StartNs).UTC().Format(time.RFC3339Nano), "end": time.Unix(0, f.EndNs).UTC().Format(time.RFC3339Nano),
		"status": cert.Status, "events": strconv.Itoa(cert.Events), "chain": cert.Chain, "key_id": cert.KeyID}
	if err := rw.close(meta, cb, cert.CreatedNs); err != nil {
		return Result{}, err
	}
	var res Result
	res.Certificate, res.Bytes = cert, hw.n
	hw.h.Sum(res.SHA256[:0])
	return res, nil
}

type hashingWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (h *hashingWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// exporter merges the flight's streams by ingest time into one record.
type exporter struct {
	f       Flight
	o       ExportOptions
	rw      *recordWriter
	dec     *mavDecoder
	streams []*streamRead
	heads   []*centralread.Item
	n       uint32
	keys    map[[2]string]*KeyReport
	keyList []*KeyReport
	gaps    []Gap
	lostAt  []int // per stream: loss records already turned into gaps
	tlog    []byte
	buf     []byte // a video message being encoded
}

func newExporter(ctx context.Context, nc *nats.Conn, f Flight, o ExportOptions, rw *recordWriter) (*exporter, error) {
	dec, err := newMavDecoder()
	if err != nil {
		return nil, err
	}
	x := &exporter{f: f, o: o, rw: rw, dec: dec, keys: map[[2]string]*KeyReport{}}
	for _, s := range []struct{ name, key string }{{o.Streams.Telemetry, f.Drone}, {o.Streams.Video, f.Drone}, {o.Streams.Health, f.Agent}} {
		if s.name == "" {
			continue
		}
		sr, err := openStream(ctx, nc, s.name, f.Agent, s.key, f)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			x.close(ctx)
			return nil, err
		}
		x.streams = append(x.streams, sr)
	}
	x.heads = make([]*centralread.Item, len(x.streams))
	x.lostAt = make([]int, len(x.streams))
	return x, nil
}

func (x *exporter) close(ctx context.Context) {
	for _, s := range x.streams {
		s.stopAhead()
		s.r.Close(ctx)
	}
}

// run reads every stream to its end for the flight, writing events in
// ingest-time order (each stream's own order kept). Each stream is read
// by its own goroutine a few events ahead, so that fetching and decoding
// overlap the writing; the merge takes them in the same order as a read
// in line would, so the record is the same.
func (x *exporter) run(ctx context.Context) error {
	for _, s := range x.streams {
		s.readAhead(ctx)
	}
	for i, s := range x.streams {
		if err := x.advance(ctx, i, s); err != nil {
			return err
		}
	}
	for {
		best := -1
		for i, h := range x.heads {
			if h != nil && (best < 0 || h.Event.Record.IngestTime < x.heads[best].Event.Record.IngestTime) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		if err := x.event(x.streams[best], x.heads[best]); err != nil {
			return err
		}
		if err := x.advance(ctx, best, x.streams[best]); err != nil {
			return err
		}
	}
}

func (x *exporter) advance(ctx context.Context, i int, s *streamRead) error {
	a, err := s.take(ctx)
	if err != nil {
		return err
	}
	if errors.Is(a.err, io.EOF) {
		x.heads[i] = nil
	} else if a.err != nil {
		return a.err
	} else {
		x.heads[i] = &a.it
	}
	for ; x.lostAt[i] < len(a.lost); x.lostAt[i]++ {
		l := a.lost[x.lostAt[i]]
		g := Gap{Kind: "lost", Stream: s.name, Agent: x.f.Agent, Reason: string(l.Reason), TimeNs: l.FoundAtNs}
		if err := x.gap(g, 0, l.FoundAtNs); err != nil {
			return err
		}
	}
	return nil
}

func (x *exporter) gap(g Gap, seq uint32, logNs int64) error {
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	if _, err := x.rw.channel(TopicGaps, encJSON, "edge.flight.Gap", []byte(schemaGap)); err != nil {
		return err
	}
	x.gaps = append(x.gaps, g)
	return x.rw.message(TopicGaps, seq, logNs, g.TimeNs, b)
}

// event writes one event: its data messages, then its entry.
func (x *exporter) event(s *streamRead, it *centralread.Item) error {
	x.n++
	rec := &it.Event.Record
	e := Entry{N: x.n, Stream: s.name, Agent: it.Agent, Seq: it.Seq, Txn: it.Event.Txn, Position: rec.Position.String(),
		Key: rec.RoutingKey, Writer: rec.Writer, EventTimeNs: rec.EventTime, IngestTimeNs: rec.IngestTime,
		Flags: uint16(rec.Flags), ContentType: rec.ContentType, Dropped: it.Event.Dropped}
	sum := sha256.New()
	var err error
	switch {
	case e.Dropped != "" || rec.Flags.Has(localstream.FlagGap):
		err = x.gapEvent(&e, rec, sum)
	case strings.HasPrefix(rec.ContentType, "video/"):
		err = x.video(&e, rec, sum)
	case rec.ContentType == mavlink.ContentType:
		err = x.mavlink(&e, rec, sum)
	case isJSON(rec):
		err = x.json(&e, s, rec, sum)
	default:
		err = x.raw(&e, s, rec, sum)
	}
	if err != nil {
		return err
	}
	e.PayloadSHA256 = hex.EncodeToString(sum.Sum(nil))
	x.noteKey(s.name, rec)
	return x.rw.entry(&e)
}

func (x *exporter) noteKey(stream string, rec *localstream.Record) {
	k := [2]string{stream, rec.RoutingKey}
	kr := x.keys[k]
	if kr == nil {
		kr = &KeyReport{Stream: stream, Key: rec.RoutingKey, First: rec.Position.String()}
		x.keys[k] = kr
		x.keyList = append(x.keyList, kr)
	}
	kr.Events++
	kr.Last = rec.Position.String()
}

func (x *exporter) gapEvent(e *Entry, rec *localstream.Record, sum hash.Hash) error {
	g := Gap{Kind: "marker", Stream: e.Stream, Agent: e.Agent, Position: e.Position, Key: e.Key, Reason: e.Dropped, TimeNs: eventTime(rec)}
	if e.Dropped == "" {
		g.Kind, g.Reason = "shed", shedReason(rec.Payload)
		g.Payload = base64.StdEncoding.EncodeToString(rec.Payload)
		sum.Write(rec.Payload)
	}
	e.Topic, e.Messages = TopicGaps, 1
	return x.gap(g, e.N, rec.IngestTime)
}

// shedReason is a shed marker's reason: its payload's "reason" field
// when it has one.
func shedReason(p []byte) string {
	var v struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(p, &v) == nil && v.Reason != "" {
		return v.Reason
	}
	return "shed"
}

type stamp struct {
	Sec  int64 `json:"sec"`
	Nsec int64 `json:"nsec"`
}

func stampOf(ns int64) stamp { return stamp{Sec: ns / 1e9, Nsec: ns % 1e9} }

func (x *exporter) video(e *Entry, rec *localstream.Record, sum hash.Hash) error {
	c, err := video.DecodeChunk(rec.Event)
	if err != nil {
		return x.raw(e, &streamRead{name: e.Stream}, rec, sum)
	}
	e.Topic = "/video/" + rec.RoutingKey
	if _, err := x.rw.channel(e.Topic, encProtobuf, videoSchemaName, CompressedVideoSchema()); err != nil {
		return err
	}
	off := 0
	for _, fr := range c.Frames {
		data := c.Payload[off : off+fr.Size]
		off += fr.Size
		x.buf = appendVideo(x.buf[:0], fr.PTS, rec.RoutingKey, data, string(c.Codec))
		sum.Write(data)
		e.Messages++
		if err := x.rw.message(e.Topic, e.N, rec.IngestTime, fr.PTS, x.buf); err != nil {
			return err
		}
	}
	return nil
}

// locationFix is foxglove.LocationFix in JSON encoding.
type locationFix struct {
	Timestamp          stamp      `json:"timestamp"`
	FrameID            string     `json:"frame_id"`
	Latitude           float64    `json:"latitude"`
	Longitude          float64    `json:"longitude"`
	Altitude           float64    `json:"altitude"`
	PositionCovariance [9]float64 `json:"position_covariance"`
	CovarianceType     int        `json:"position_covariance_type"`
}

func (x *exporter) position(rec *localstream.Record, seq uint32, lat, lon, alt float64) error {
	topic := "/position/" + rec.RoutingKey
	if _, err := x.rw.channel(topic, encJSON, "foxglove.LocationFix", []byte(schemaLocationFix)); err != nil {
		return err
	}
	b, err := json.Marshal(locationFix{Timestamp: stampOf(eventTime(rec)), FrameID: rec.RoutingKey, Latitude: lat, Longitude: lon, Altitude: alt})
	if err != nil {
		return err
	}
	return x.rw.message(topic, seq, rec.IngestTime, eventTime(rec), b)
}

func (x *exporter) mavlink(e *Entry, rec *localstream.Record, sum hash.Hash) error {
	e.Topic, e.Messages = "/mavlink/"+rec.RoutingKey, 1
	if _, err := x.rw.channel(e.Topic, encMAVLink, "", nil); err != nil {
		return err
	}
	sum.Write(rec.Payload)
	if err := x.rw.message(e.Topic, e.N, rec.IngestTime, rec.EventTime, rec.Payload); err != nil {
		return err
	}
	if x.o.Tlog != nil {
		x.tlog = mavlink.AppendTlogEntry(x.tlog[:0], time.Unix(0, tlogTime(rec)), rec.Payload)
		if _, err := x.o.Tlog.Write(x.tlog); err != nil {
			return fmt.Errorf("flight: tlog: %w", err)
		}
	}
	if m := x.dec.decode(rec); m != nil {
		if lat, lon, alt, ok := mavPosition(m); ok {
			return x.position(rec, e.N, lat, lon, alt)
		}
	}
	return nil
}

func isJSON(rec *localstream.Record) bool {
	ct := rec.ContentType
	return (ct == "application/json" || strings.HasSuffix(ct, "+json")) && !rec.Flags.Has(localstream.FlagRaw) && json.Valid(rec.Payload)
}

func (x *exporter) json(e *Entry, s *streamRead, rec *localstream.Record, sum hash.Hash) error {
	kind := "/telemetry/"
	if s.name == x.o.Streams.Health {
		kind = "/health/"
	}
	e.Topic, e.Messages = kind+rec.RoutingKey, 1
	if _, err := x.rw.channel(e.Topic, encJSON, "edge.Telemetry", []byte(schemaObject)); err != nil {
		return err
	}
	sum.Write(rec.Payload)
	if err := x.rw.message(e.Topic, e.N, rec.IngestTime, eventTime(rec), rec.Payload); err != nil {
		return err
	}
	if kind != "/telemetry/" {
		return nil
	}
	var p struct {
		Lat       *float64 `json:"lat"`
		Lon       *float64 `json:"lon"`
		Alt       *float64 `json:"alt"`
		Latitude  *float64 `json:"latitude"`
		Longitude *float64 `json:"longitude"`
		Altitude  *float64 `json:"altitude"`
	}
	if json.Unmarshal(rec.Payload, &p) != nil {
		return nil
	}
	lat, lon, alt := p.Lat, p.Lon, p.Alt
	if lat == nil {
		lat, lon, alt = p.Latitude, p.Longitude, p.Altitude
	}
	if lat == nil || lon == nil {
		return nil
	}
	var a float64
	if alt != nil {
		a = *alt
	}
	return x.position(rec, e.N, *lat, *lon, a)
}

func (x *exporter) raw(e *Entry, s *streamRead, rec *localstream.Record, sum hash.Hash) error {
	e.Topic, e.Messages = "/raw/"+s.name+"/"+rec.RoutingKey, 1
	if _, err := x.rw.channel(e.Topic, encRaw, "", nil); err != nil {
		return err
	}
	sum.Write(rec.Payload)
	return x.rw.message(e.Topic, e.N, rec.IngestTime, eventTime(rec), rec.Payload)
}

// certificate assembles the certificate (unsigned).
func (x *exporter) certificate(now int64) Certificate {
	c := Certificate{Version: 1, Flight: x.f, Gaps: x.gaps, Channels: x.rw.channelCounts(),
		Events: x.rw.chain.n, Chain: x.rw.chain.hex(), CreatedNs: now, Streams: []StreamReport{}, Keys: []KeyReport{}}
	if c.Gaps == nil {
		c.Gaps = []Gap{}
	}
	for _, s := range x.streams {
		if len(s.report.Commits) == 0 && s.report.Events == 0 {
			continue // the agent never wrote this stream
		}
		c.Streams = append(c.Streams, s.report)
		c.Reasons = append(c.Reasons, s.report.Problems...)
	}
	for _, k := range x.keyList {
		c.Keys = append(c.Keys, *k)
	}
	if x.f.Open {
		c.Reasons = append(c.Reasons, "the drone was still in flight at the last telemetry the centre holds")
	}
	if len(c.Streams) == 0 {
		c.Reasons = append(c.Reasons, "the centre holds no stream of agent "+x.f.Agent)
	}
	c.Status = StatusComplete
	if len(c.Reasons) > 0 {
		c.Status = StatusIncomplete
	}
	return c
}

// tlogTime is a frame's time in a tlog: the time the tlog it was replayed
// from recorded (mavlink-tlog-us), else when the agent received it — as
// `export telemetry --format tlog` writes it.
func tlogTime(rec *localstream.Record) int64 {
	if v, ok := rec.Header(mavlink.HeaderTlogTime); ok {
		if us, err := strconv.ParseInt(v, 10, 64); err == nil {
			return us * 1000
		}
	}
	return rec.IngestTime
}
