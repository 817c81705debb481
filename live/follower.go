package live

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edge-agent/edge-agent/ingest/guard"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
)

// droneIdle: a drone with no new event for this long (by the events'
// ingest times, the intakes' clock) gives its slot to a new drone when
// the table is full. Its last value was sent long since (the intervals
// are seconds); the centre keeps it for the TTL.
const droneIdle = time.Minute

// follower keeps the latest value of every drone of one local stream by
// reading its tail. Its table is bounded (Config.MaxDrones) and gives
// back the slots of drones silent for droneIdle (guard.Table); a value is
// a copy, never the reader's memory. Safe for concurrent use.
type follower struct {
	st        *localstream.Stream
	cfg       StreamConfig
	maxDrones int
	seed      int
	log       *slog.Logger

	mu sync.Mutex
	// latest holds each drone's latest value and its version. Guarded by mu.
	latest *guard.Table[string, *slot]
	// version numbers the values, across drones (mu): a drone released
	// and back gets versions above any the lane sent it before.
	version uint64

	// refused counts values of drones beyond maxDrones; skipped counts
	// video events without a keyframe that could be read (keyframes
	// mode); readErrs counts reader restarts.
	refused, skipped, readErrs atomic.Uint64
}

// slot is one drone's latest value.
type slot struct {
	v       value
	version uint64
}

func newFollower(st *localstream.Stream, cfg StreamConfig, maxDrones, seed int, log *slog.Logger) *follower {
	return &follower{st: st, cfg: cfg, maxDrones: maxDrones, seed: seed, log: log,
		latest: guard.NewTable(guard.TableConfig[string, *slot]{Max: maxDrones, Idle: droneIdle})}
}

// run follows the stream until ctx ends. A reader error (retention
// removed what it was about to read) restarts it at the tail.
func (f *follower) run(ctx context.Context) {
	from := f.seedCut()
	for ctx.Err() == nil {
		err := f.follow(ctx, from)
		if ctx.Err() != nil {
			return
		}
		f.readErrs.Add(1)
		f.log.Debug("live: reader restarts at the tail", "stream", f.st.Name(), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		from = f.st.TailCut()
	}
}

// seedCut is the tail cut moved back by seed events in every segment
// (not before what retention kept), so that the lane has values before
// new events arrive.
func (f *follower) seedCut() localstream.StreamCut {
	topo := f.st.Topology()
	cut := topo.TailCut()
	cut.Positions = maps.Clone(cut.Positions)
	for id, off := range cut.Positions {
		start := topo.Segments[id].Start
		if off > start+uint64(f.seed) {
			cut.Positions[id] = off - uint64(f.seed)
		} else {
			cut.Positions[id] = start
		}
	}
	if topo.Validate(cut) != nil {
		return topo.TailCut()
	}
	return cut
}

func (f *follower) follow(ctx context.Context, from localstream.StreamCut) error {
	rd, err := f.st.NewReader(from, nil)
	if err != nil {
		return err
	}
	defer rd.Close()
	for {
		rec, err := rd.Next(ctx)
		if err != nil {
			return err
		}
		if rec.Flags.Has(localstream.FlagGap) {
			continue // a gap marker is not a drone's state
		}
		v, ok := f.take(&rec)
		if !ok {
			continue
		}
		f.put(v)
	}
}

// take turns a record into a value: a copy of the event, or for
// keyframes its last keyframe access unit.
func (f *follower) take(rec *localstream.Record) (value, bool) {
	v := value{drone: rec.RoutingKey, writer: rec.Writer, contentType: rec.ContentType,
		segment: uint64(rec.Segment), offset: rec.Offset, eventNs: rec.EventTime, ingestNs: rec.IngestTime,
		keyframe: rec.Flags.Has(localstream.FlagKeyframe)}
	if !f.cfg.KeyframesOnly() {
		v.payload = bytes.Clone(rec.Payload)
		return v, true
	}
	if !hasKey(rec) {
		return value{}, false
	}
	c, err := video.DecodeChunk(rec.Event)
	if err != nil {
		f.skipped.Add(1)
		return value{}, false
	}
	for i := len(c.Frames) - 1; i >= 0; i-- {
		if c.Frames[i].Key {
			v.payload = bytes.Clone(c.FrameData(i))
			v.eventNs, v.keyframe = c.Frames[i].PTS, true
			return v, true
		}
	}
	return value{}, false
}

// hasKey reports whether a video chunk lists a keyframe.
func hasKey(rec *localstream.Record) bool {
	k, _ := rec.Header(video.HeaderFrameKeys)
	return k != ""
}

// put makes v the drone's latest value (a new drone while every slot is
// held by a live one is refused and counted).
func (f *follower) put(v value) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.latest.Get(v.drone, v.ingestNs)
	if !ok {
		s = &slot{}
		if !f.latest.Add(v.drone, s, v.ingestNs) {
			f.refused.Add(1)
			return
		}
	}
	f.version++
	s.v, s.version = v, f.version
}

// pending returns the drones whose version is above sent's, with their
// values and versions.
//
// It also forgets, in the lane's records (sent, sentAt), the drones the
// table has released: they would otherwise grow with every drone id the
// agent ever saw. A released drone that returns gets a version above
// any sent before (version counts across drones), so it is sent again.
func (f *follower) pending(sent map[string]uint64, sentAt map[string]time.Time) []slot {
	f.mu.Lock()
	defer f.mu.Unlock()
	for d := range sent {
		if _, ok := f.latest.Peek(d); !ok {
			delete(sent, d)
			delete(sentAt, d)
		}
	}
	var out []slot
	for d, s := range f.latest.All() {
		if s.version > sent[d] {
			out = append(out, *s)
		}
	}
	return out
}

// drones is how many drones the table holds.
func (f *follower) drones() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest.Len()
}
