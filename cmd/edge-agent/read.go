package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

func init() {
	commands["read"] = command{
		summary: "read a central stream: events in order with the committed watermark (JSON lines); --live: each drone's latest value",
		run:     runRead,
	}
}

// parseTimeFlag accepts RFC 3339 or Unix ns; "" is 0.
func parseTimeFlag(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, usagef("--%s %q: want RFC 3339 (2026-01-02T15:04:05Z) or Unix ns", name, v)
	}
	return t.UnixNano(), nil
}

func parseCutFlag(name, v string) (*localstream.StreamCut, error) {
	if v == "" {
		return nil, nil
	}
	c, err := localstream.ParseStreamCut(v)
	if err != nil {
		return nil, usagef("--%s: %v", name, err)
	}
	return &c, nil
}

// dialReason says why the servers of a URL list cannot be reached: each
// one's TCP dial error (connection refused, a timeout), or that TCP
// connects but NATS does not answer.
func dialReason(urls string) string {
	var why []string
	for _, u := range strings.Split(urls, ",") {
		host := u
		if i := strings.Index(host, "://"); i >= 0 {
			host = host[i+3:]
		}
		if i := strings.LastIndex(host, "@"); i >= 0 {
			host = host[i+1:]
		}
		host, _, _ = strings.Cut(host, "/")
		if _, _, err := net.SplitHostPort(host); err != nil {
			host = net.JoinHostPort(host, "4222")
		}
		c, err := net.DialTimeout("tcp", host, 2*time.Second)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		c.Close()
		why = append(why, host+": TCP connects but no NATS server answers (TLS or credentials refused?)")
	}
	return strings.Join(why, "; ")
}

// readLine is one JSON line of `edge-agent read`.
type readLine struct {
	Type         string            `json:"type"`
	Seq          uint64            `json:"seq"`
	Agent        string            `json:"agent"`
	Stream       string            `json:"stream"`
	Txn          uint64            `json:"txn"`
	Segment      string            `json:"segment,omitempty"`
	Offset       *uint64           `json:"offset,omitempty"`
	RoutingKey   string            `json:"routing_key,omitempty"`
	Writer       string            `json:"writer,omitempty"`
	EventTimeNs  int64             `json:"event_time_ns,omitempty"`
	IngestTimeNs int64             `json:"ingest_time_ns,omitempty"`
	Flags        []string          `json:"flags,omitempty"`
	ContentType  string            `json:"content_type,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	Payload      json.RawMessage   `json:"payload,omitempty"`
	PayloadB64   string            `json:"payload_b64,omitempty"`
	// MAVLink is a MAVLink frame decoded with the dialect (name, header, fields).
	MAVLink   *mavlink.Message   `json:"mavlink,omitempty"`
	Cut       string             `json:"cut,omitempty"`
	Watermark wire.WatermarkJSON `json:"watermark"`

	// Dropped is the reason on a marker: the event could not be sent.
	Dropped string `json:"dropped,omitempty"`
}

var flagNames = []struct {
	f    localstream.Flags
	name string
}{
	{localstream.FlagKeyframe, "keyframe"}, {localstream.FlagDiscontinuity, "discontinuity"},
	{localstream.FlagLate, "late"}, {localstream.FlagEstimatedTime, "estimated_time"},
	{localstream.FlagGap, "gap"}, {localstream.FlagRaw, "raw"}, {localstream.FlagClockSkew, "clock_skew"},
}

func toLine(it centralread.Item) readLine {
	if it.Kind == centralread.ItemCommit {
		return readLine{Type: "commit", Seq: it.Seq, Agent: it.Agent, Stream: it.Commit.Stream, Txn: it.Commit.Txn, Cut: it.Commit.CutText, Watermark: it.Watermark}
	}
	r := it.Event.Record
	off := r.Offset
	l := readLine{Type: "event", Seq: it.Seq, Agent: it.Agent, Stream: it.Event.Stream, Txn: it.Event.Txn,
		Segment: r.Segment.String(), Offset: &off, RoutingKey: r.RoutingKey, Writer: r.Writer,
		EventTimeNs: r.EventTime, IngestTimeNs: r.IngestTime, ContentType: r.ContentType, Watermark: it.Watermark,
		Dropped: it.Event.Dropped}
	for _, f := range flagNames {
		if r.Flags.Has(f.f) {
			l.Flags = append(l.Flags, f.name)
		}
	}
	if len(r.Headers) > 0 {
		l.Headers = map[string]string{}
		for _, h := range r.Headers {
			l.Headers[h.Key] = h.Value
		}
	}
	// json.Valid accepts invalid UTF-8 inside strings; printed raw, it
	// would make the line invalid JSON. Such payloads go in payload_b64.
	if strings.Contains(r.ContentType, "json") && json.Valid(r.Payload) && utf8.Valid(r.Payload) {
		l.Payload = r.Payload
	} else {
		l.PayloadB64 = base64.StdEncoding.EncodeToString(r.Payload)
	}
	if r.ContentType == mavlink.ContentType {
		if m, err := mavlink.DefaultDialect().Decode(r.Payload); err == nil {
			l.MAVLink = &m
		}
	}
	return l
}

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("read", stderr)
	conn := addCentralFlags(fs)
	stream := fs.String("stream", "", "local stream `NAME` (telemetry, video, health, ...); required")
	agent := fs.String("agent", "", "only this agent `ID`")
	drone := fs.String("drone", "", "only this drone (routing key)")
	from := fs.String("from", "", "events at or after `TIME` (RFC 3339 or Unix ns)")
	to := fs.String("to", "", "events at or before `TIME`; ends once the watermark passes it")
	fromCut := fs.String("from-cut", "", "start after the agent's commit at `CUT` (text form; needs --agent)")
	toCut := fs.String("to-cut", "", "end at the agent's commit at `CUT` (needs --agent)")
	follow := fs.Bool("follow", false, "keep reading new events")
	commits := fs.Bool("commits", false, "also print commit records")
	liveFlag := fs.Bool("live", false, "the live lane instead: each drone's latest value with its age and whether the backlog covers it (--stream, --agent, --drone select; docs/live.md)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *liveFlag {
		if *from != "" || *to != "" || *fromCut != "" || *toCut != "" || *follow || *commits {
			return usagef("--live takes the connection flags, --stream, --agent and --drone only")
		}
		return readLive(ctx, conn, *stream, *agent, *drone, stdout)
	}
	if *stream == "" {
		return usagef("--stream NAME is required: the local stream to read (telemetry, video, health, ...)")
	}
	if err := localstream.ValidateStreamName(*stream); err != nil {
		return usagef("--stream: %v", err)
	}
	q := centralread.Query{ReadOptions: centralread.ReadOptions{Agent: *agent, RoutingKey: *drone, Follow: *follow}, Commits: *commits}
	var err error
	if q.FromTimeNs, err = parseTimeFlag("from", *from); err != nil {
		return err
	}
	if q.ToTimeNs, err = parseTimeFlag("to", *to); err != nil {
		return err
	}
	if q.FromCut, err = parseCutFlag("from-cut", *fromCut); err != nil {
		return err
	}
	if q.ToCut, err = parseCutFlag("to-cut", *toCut); err != nil {
		return err
	}
	if (q.FromCut != nil || q.ToCut != nil) && *agent == "" {
		return usagef("--from-cut/--to-cut need --agent")
	}
	nc, err := conn.connect("edge-agent-read")
	if err != nil {
		return err
	}
	defer nc.Close()
	enc := json.NewEncoder(stdout)
	events := 0
	err = centralread.RunQuery(ctx, nc, *stream, q, func(it centralread.Item) error {
		if it.Kind == centralread.ItemEvent {
			events++
		}
		return enc.Encode(toLine(it))
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("no stream %q at the centre; %s", *stream, centralStreams(ctx, nc))
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("read %s: %w", *stream, err)
	}
	if events == 0 && *drone != "" && ctx.Err() == nil {
		return droneUnknown(ctx, nc, *stream, *drone, q)
	}
	return nil
}

// centralStreams lists the local streams that have a central stream
// (EDGE_<STREAM>), for a message about one that has none.
func centralStreams(ctx context.Context, nc *nats.Conn) string {
	js, err := jetstream.New(nc)
	if err != nil {
		return err.Error()
	}
	var names []string
	l := js.StreamNames(ctx, jetstream.WithStreamListSubject("edge.>"))
	for n := range l.Name() {
		if s, ok := strings.CutPrefix(n, "EDGE_"); ok {
			names = append(names, strings.ToLower(s))
		}
	}
	if l.Err() != nil && len(names) == 0 {
		return "listing the streams: " + l.Err().Error()
	}
	if len(names) == 0 {
		return "there is none yet (no agent has replicated)"
	}
	slices.Sort(names)
	return "streams there: " + strings.Join(names, ", ")
}

// droneUnknown is the error of a read of a drone with no event: the
// drones the stream has (in the same agent and time range), read again
// without the drone filter.
func droneUnknown(ctx context.Context, nc *nats.Conn, stream, drone string, q centralread.Query) error {
	q.RoutingKey, q.Follow, q.Commits = "", false, false
	seen := map[string]bool{}
	err := centralread.RunQuery(ctx, nc, stream, q, func(it centralread.Item) error {
		if it.Kind == centralread.ItemEvent {
			seen[it.Event.Record.RoutingKey] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read %s: no event of drone %q (listing the drones there: %w)", stream, drone, err)
	}
	if len(seen) == 0 {
		return fmt.Errorf("read %s: no event of drone %q: the stream has no event in that range", stream, drone)
	}
	return fmt.Errorf("read %s: no event of drone %q; drones there: %s", stream, drone, strings.Join(slices.Sorted(maps.Keys(seen)), ", "))
}
