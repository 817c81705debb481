package flight

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
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

// Export writes flight's record to w and returns its certificate. w is
// written by a goroutine of Export's, in order; every write is done when
// Export returns.
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
	out := newOutput(w)
	defer out.close()
	rw, err := newRecordWriter(out, o.Compression)
	if err != nil {
		return Result{}, err
	}
	defer rw.abandon() // before out.close: the MCAP writer writes to out
	x, err := newExporter(ctx, nc, f, o, rw)
	if err != nil {
		return Result{}, err
	}
	defer x.close(context.WithoutCancel(ctx)) // waits for the one below
	if err := x.run(ctx); err != nil {
		return Result{}, err
	}
	// Every stream is read: their consumers at the centre go while the
	// record is finished.
	go x.close(context.WithoutCancel(ctx))
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
	if err := out.close(); err != nil {
		return Result{}, err
	}
	var res Result
	res.Certificate, res.Bytes = cert, out.n
	out.h.Sum(res.SHA256[:0])
	return res, nil
}

// exporter merges the flight's streams by ingest time into one record.
type exporter struct {
	f       Flight
	o       ExportOptions
	rw      *recordWriter
	streams []*streamRead
	heads   []*centralread.Item
	preps   []prepared // what each head becomes
	n       uint32
	keys    map[[2]string]*KeyReport
	keyList []*KeyReport
	gaps    []Gap
	lostAt  []int // per stream: loss records already turned into gaps
	tlog    []byte
	closing sync.Once
}

func newExporter(ctx context.Context, nc *nats.Conn, f Flight, o ExportOptions, rw *recordWriter) (*exporter, error) {
	x := &exporter{f: f, o: o, rw: rw, keys: map[[2]string]*KeyReport{}}
	type open struct {
		name, key string
		sr        *streamRead
		err       error
	}
	opens := []*open{{name: o.Streams.Telemetry, key: f.Drone}, {name: o.Streams.Video, key: f.Drone}, {name: o.Streams.Health, key: f.Agent}}
	// The streams are opened at once: each open is three round trips to
	// the centre (the stream, its consumer, its last sequence).
	var wg sync.WaitGroup
	for _, op := range opens {
		if op.name != "" {
			wg.Go(func() { op.sr, op.err = openStream(ctx, nc, op.name, f.Agent, op.key, f) })
		}
	}
	wg.Wait()
	var err error
	for _, op := range opens {
		switch {
		case op.name == "" || errors.Is(op.err, jetstream.ErrStreamNotFound):
		case op.err != nil:
			err = cmp.Or(err, op.err)
		default:
			op.sr.health = op.name == o.Streams.Health
			x.streams = append(x.streams, op.sr)
		}
	}
	if err != nil {
		x.close(ctx)
		return nil, err
	}
	x.heads = make([]*centralread.Item, len(x.streams))
	x.preps = make([]prepared, len(x.streams))
	x.lostAt = make([]int, len(x.streams))
	return x, nil
}

// close stops the streams' readers and deletes their consumers at the
// centre, all at once. A second call waits for the first to end.
func (x *exporter) close(ctx context.Context) {
	x.closing.Do(func() {
		var wg sync.WaitGroup
		for _, s := range x.streams {
			wg.Go(func() {
				s.stopAhead()
				s.r.Close(ctx)
			})
		}
		wg.Wait()
	})
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
		if err := x.write(x.streams[best], x.heads[best], &x.preps[best]); err != nil {
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
		x.heads[i], x.preps[i] = &a.it, a.prep
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
	if _, err := x.rw.channel(TopicGaps, encJSON, "edge.flight.Gap", schemaGap); err != nil {
		return err
	}
	x.gaps = append(x.gaps, g)
	return x.rw.message(TopicGaps, seq, logNs, g.TimeNs, b)
}

// event writes one event, prepared in line (tests; the export prepares
// events on the streams' reader goroutines).
func (x *exporter) event(s *streamRead, it *centralread.Item) error {
	p, err := s.prepare(it)
	if err != nil {
		return err
	}
	return x.write(s, it, &p)
}

// write writes one prepared event: its data messages, then its entry.
func (x *exporter) write(s *streamRead, it *centralread.Item, p *prepared) error {
	x.n++
	rec := &it.Event.Record
	e := Entry{N: x.n, Stream: s.name, Agent: it.Agent, Seq: it.Seq, Txn: it.Event.Txn, Position: p.position,
		Key: rec.RoutingKey, Writer: rec.Writer, EventTimeNs: rec.EventTime, IngestTimeNs: rec.IngestTime,
		Flags: uint16(rec.Flags), ContentType: rec.ContentType, Dropped: it.Event.Dropped}
	var err error
	switch p.kind {
	case kindGap:
		err = x.gapEvent(&e, rec)
	case kindVideo:
		err = x.video(&e, rec, p.chunk)
	case kindMAVLink:
		err = x.mavlink(&e, rec)
	case kindJSON:
		err = x.json(&e, s, rec)
	default:
		err = x.raw(&e, s, rec)
	}
	if err == nil && p.hasPos {
		err = x.position(rec, e.N, p.lat, p.lon, p.alt)
	}
	if err != nil {
		return err
	}
	e.PayloadSHA256 = hex.EncodeToString(p.sum[:])
	x.noteKey(s.name, rec, e.Position)
	return x.rw.entry(&e)
}

func (x *exporter) noteKey(stream string, rec *localstream.Record, pos string) {
	k := [2]string{stream, rec.RoutingKey}
	kr := x.keys[k]
	if kr == nil {
		kr = &KeyReport{Stream: stream, Key: rec.RoutingKey, First: pos}
		x.keys[k] = kr
		x.keyList = append(x.keyList, kr)
	}
	kr.Events++
	kr.Last = pos
}

func (x *exporter) gapEvent(e *Entry, rec *localstream.Record) error {
	g := Gap{Kind: "marker", Stream: e.Stream, Agent: e.Agent, Position: e.Position, Key: e.Key, Reason: e.Dropped, TimeNs: eventTime(rec)}
	if e.Dropped == "" {
		g.Kind, g.Reason = "shed", shedReason(rec.Payload)
		g.Payload = base64.StdEncoding.EncodeToString(rec.Payload)
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

func (x *exporter) video(e *Entry, rec *localstream.Record, c *video.Chunk) error {
	e.Topic = "/video/" + rec.RoutingKey
	if _, err := x.rw.channel(e.Topic, encProtobuf, videoSchemaName, string(CompressedVideoSchema())); err != nil {
		return err
	}
	off := 0
	for _, fr := range c.Frames {
		data := c.Payload[off : off+fr.Size]
		off += fr.Size
		e.Messages++
		b := appendVideo(x.rw.next(), fr.PTS, rec.RoutingKey, data, string(c.Codec))
		if err := x.rw.put(e.Topic, e.N, rec.IngestTime, fr.PTS, b); err != nil {
			return err
		}
	}
	return nil
}

// appendLocationFix appends a foxglove.LocationFix in JSON encoding, as
// json.Marshal writes it (jsonappend.go): the fix's time, the drone as
// its frame, degrees and metres, the covariance unknown (nine zeros,
// type 0).
func appendLocationFix(b []byte, ns int64, frameID string, lat, lon, alt float64) ([]byte, error) {
	st := stampOf(ns)
	b = append(b, `{"timestamp":{"sec":`...)
	b = strconv.AppendInt(b, st.Sec, 10)
	b = append(b, `,"nsec":`...)
	b = strconv.AppendInt(b, st.Nsec, 10)
	b = append(b, `},"frame_id":`...)
	b = appendJSONString(b, frameID)
	for i, f := range [3]float64{lat, lon, alt} {
		b = append(b, [3]string{`,"latitude":`, `,"longitude":`, `,"altitude":`}[i]...)
		var ok bool
		if b, ok = appendJSONFloat(b, f); !ok {
			return b, fmt.Errorf("flight: position of %s: %v is not a number JSON can hold", frameID, f)
		}
	}
	return append(b, `,"position_covariance":[0,0,0,0,0,0,0,0,0],"position_covariance_type":0}`...), nil
}

func (x *exporter) position(rec *localstream.Record, seq uint32, lat, lon, alt float64) error {
	topic := "/position/" + rec.RoutingKey
	if _, err := x.rw.channel(topic, encJSON, "foxglove.LocationFix", schemaLocationFix); err != nil {
		return err
	}
	b, err := appendLocationFix(x.rw.next(), eventTime(rec), rec.RoutingKey, lat, lon, alt)
	if err != nil {
		return err
	}
	return x.rw.put(topic, seq, rec.IngestTime, eventTime(rec), b)
}

func (x *exporter) mavlink(e *Entry, rec *localstream.Record) error {
	e.Topic, e.Messages = "/mavlink/"+rec.RoutingKey, 1
	if _, err := x.rw.channel(e.Topic, encMAVLink, "", ""); err != nil {
		return err
	}
	if err := x.rw.message(e.Topic, e.N, rec.IngestTime, rec.EventTime, rec.Payload); err != nil {
		return err
	}
	if x.o.Tlog != nil {
		x.tlog = mavlink.AppendTlogEntry(x.tlog[:0], time.Unix(0, tlogTime(rec)), rec.Payload)
		if _, err := x.o.Tlog.Write(x.tlog); err != nil {
			return fmt.Errorf("flight: tlog: %w", err)
		}
	}
	return nil
}

func (x *exporter) json(e *Entry, s *streamRead, rec *localstream.Record) error {
	kind := "/telemetry/"
	if s.health {
		kind = "/health/"
	}
	e.Topic, e.Messages = kind+rec.RoutingKey, 1
	if _, err := x.rw.channel(e.Topic, encJSON, "edge.Telemetry", schemaObject); err != nil {
		return err
	}
	return x.rw.message(e.Topic, e.N, rec.IngestTime, eventTime(rec), rec.Payload)
}

func (x *exporter) raw(e *Entry, s *streamRead, rec *localstream.Record) error {
	e.Topic, e.Messages = "/raw/"+s.name+"/"+rec.RoutingKey, 1
	if _, err := x.rw.channel(e.Topic, encRaw, "", ""); err != nil {
		return err
	}
	return x.rw.message(e.Topic, e.N, rec.IngestTime, eventTime(rec), rec.Payload)
}

// certificate assembles the certificate (unsigned).
func (x *exporter) certificate(now int64) Certificate {
	c := Certificate{Version: 1, Flight: x.f, Gaps: x.gaps, Channels: x.rw.channelCounts(),
		Events: x.rw.chain.n, Chain: x.rw.chain.hex(), CreatedNs: now, Keys: []KeyReport{}}
	if c.Gaps == nil {
		c.Gaps = []Gap{}
	}
	c.Status, c.Reasons, c.Streams = judge(x.f, x.streams)
	for _, k := range x.keyList {
		c.Keys = append(c.Keys, *k)
	}
	return c
}

// judge says whether the flight's record is complete from its streams'
// reports, and why not: the certificate's status, reasons and streams.
func judge(f Flight, streams []*streamRead) (status string, reasons []string, reports []StreamReport) {
	reports = []StreamReport{}
	for _, s := range streams {
		if len(s.report.Commits) == 0 && s.report.Events == 0 {
			continue // the agent never wrote this stream
		}
		reports = append(reports, s.report)
		reasons = append(reasons, s.report.Problems...)
	}
	if f.Open {
		reasons = append(reasons, "the drone was still in flight at the last telemetry the centre holds")
	}
	if len(reports) == 0 {
		reasons = append(reasons, "the centre holds no stream of agent "+f.Agent)
	}
	if len(reasons) > 0 {
		return StatusIncomplete, reasons, reports
	}
	return StatusComplete, nil, reports
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
