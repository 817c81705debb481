package flight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// streamRead reads one central stream of the flight's agent in commit
// order: it returns the flight's events of that stream (next) and checks,
// commit by commit, what makes the stream's part of the record complete:
// consecutive transactions, every offset of the agent's segments present
// or covered by a loss record, and a committed watermark past the
// flight's end. It stops at the first commit whose watermark lower bound
// passes the flight's end: nothing of the flight can follow it.
type streamRead struct {
	name   string
	key    string // routing key selected: the drone, or the agent for health
	fromNs int64
	toNs   int64
	r      *centralread.CentralReader
	done   bool
	// health: the stream is the agent's health (no positions in it).
	health bool
	// dec decodes the stream's MAVLink frames (prepare).
	dec *mavDecoder

	// The reader goroutine (readAhead) and what it has read.
	ahead  chan ahead
	stop   chan struct{}
	exited chan struct{}

	// What the certificate says of the stream.
	report StreamReport

	started bool // a selected event was read
	prev    *wire.CommitRecord
	// seen holds the offsets of the agent's events since the last commit,
	// by segment (every routing key: offsets are dense per segment).
	seen map[localstream.SegmentID][]uint64
	// lost are the loss records of the commits read since started.
	lost []wire.LostRange
	// problems are why the stream's part is not complete (so far).
	problems []string
	// holes are offset ranges missing from transactions and not covered by
	// a loss record; sheds are the ranges shed markers (localstream.Gap
	// payloads) say were dropped. A hole a shed covers is accounted for;
	// the marker may come transactions after the hole.
	holes, sheds []span
	// base is the epoch base of the last commit (shed markers carry
	// local positions).
	base uint32
}

// span is offsets [from, to) of one segment.
type span struct {
	seg      localstream.SegmentID
	from, to uint64
}

// StreamReport is what the certificate says of one stream.
type StreamReport struct {
	Stream string `json:"stream"`
	Agent  string `json:"agent"`
	// FirstSeq and LastSeq bound the central sequences read.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Commits are the committed transactions that cover the flight, in
	// order: from the one before its first event to the one whose
	// watermark passed its end.
	Commits []CommitRef `json:"commits"`
	// Watermark is the committed watermark of the last commit read.
	Watermark wire.WatermarkJSON `json:"watermark"`
	// Events is how many of the stream's events the record holds.
	Events int `json:"events"`
	// Complete is set when the stream's part is complete; Problems say
	// why not.
	Complete bool     `json:"complete"`
	Problems []string `json:"problems,omitempty"`
}

// CommitRef is one commit record of a stream.
type CommitRef struct {
	Txn uint64 `json:"txn"`
	Seq uint64 `json:"seq"`
	Cut string `json:"cut"`
}

func openStream(ctx context.Context, nc *nats.Conn, stream, agent, key string, f Flight) (*streamRead, error) {
	r, err := centralread.NewCentralReader(ctx, nc, stream, centralread.ReadOptions{Agent: agent})
	if err != nil {
		return nil, fmt.Errorf("flight: open %s: %w", stream, err)
	}
	s := newStreamRead(stream, agent, key, f)
	s.r = r
	return s, nil
}

// newStreamRead is the check of one stream's part of flight f (events of
// routing key key), without a reader.
func newStreamRead(stream, agent, key string, f Flight) *streamRead {
	return &streamRead{name: stream, key: key, fromNs: f.StartNs, toNs: f.EndNs,
		report: StreamReport{Stream: stream, Agent: agent},
		seen:   map[localstream.SegmentID][]uint64{}}
}

// eventTime is the time a record is placed by: its event time, else
// when the agent received it.
func eventTime(rec *localstream.Record) int64 {
	if rec.EventTime != 0 {
		return rec.EventTime
	}
	return rec.IngestTime
}

// next returns the stream's next event of the flight, or io.EOF.
func (s *streamRead) next(ctx context.Context) (centralread.Item, error) {
	for !s.done {
		it, err := s.r.Next(ctx)
		if errors.Is(err, io.EOF) {
			s.finish()
			return centralread.Item{}, io.EOF
		}
		if err != nil {
			return centralread.Item{}, fmt.Errorf("flight: read %s: %w", s.name, err)
		}
		if s.sift(it) {
			return it, nil
		}
	}
	return centralread.Item{}, io.EOF
}

// sift files one item read from the stream (a commit or an event) and
// reports whether it is an event of the flight. After it set done, the
// read is over for the flight.
func (s *streamRead) sift(it centralread.Item) bool {
	if s.report.FirstSeq == 0 {
		s.report.FirstSeq = it.Seq
	}
	s.report.LastSeq = it.Seq
	if it.Kind == centralread.ItemCommit {
		s.commit(it)
		return false
	}
	rec := &it.Event.Record
	s.seen[rec.Segment] = append(s.seen[rec.Segment], rec.Offset)
	if rec.Flags.Has(localstream.FlagGap) && rec.Writer == localstream.ShedWriter {
		s.noteShed(rec.Payload)
	}
	if t := eventTime(rec); rec.RoutingKey == s.key && t >= s.fromNs && t <= s.toNs {
		s.started = true
		s.report.Events++
		return true
	}
	return false
}

// commit checks one transaction and ends the read once the watermark has
// passed the flight's end.
func (s *streamRead) commit(it centralread.Item) {
	c := it.Commit
	ref := CommitRef{Txn: c.Txn, Seq: it.Seq, Cut: c.CutText}
	if !s.started {
		// Before the flight: the last one is where its record starts.
		s.report.Commits = append(s.report.Commits[:0], ref)
		s.lost = nil
	} else {
		s.report.Commits = append(s.report.Commits, ref)
		if s.prev != nil && c.Txn != s.prev.Txn+1 {
			s.problem("transaction %d follows %d: %d missing", c.Txn, s.prev.Txn, c.Txn-s.prev.Txn-1)
		}
		if c.Lost != nil {
			s.lost = append(s.lost, *c.Lost)
		}
		s.checkOffsets(&c)
	}
	s.prev = &c
	s.base = c.EpochBase
	s.report.Watermark = c.Watermark
	clear(s.seen)
	if s.started && c.Watermark.LowerNs > s.toNs && len(s.uncovered()) == 0 {
		s.done = true
		s.finish()
	}
}

// checkOffsets checks that the transaction's events fill its cut's
// advance on every segment, except where a loss record covers them.
func (s *streamRead) checkOffsets(c *wire.CommitRecord) {
	sameBase := s.prev != nil && s.prev.EpochBase == c.EpochBase
	for name, end := range c.Cut {
		id, err := strconv.ParseUint(name, 10, 64)
		seg := localstream.SegmentID(id)
		if err != nil {
			s.problem("commit %d: segment %q: %v", c.Txn, name, err)
			continue
		}
		offs := s.seen[seg]
		slices.Sort(offs)
		var from uint64
		switch {
		case s.prev != nil && sameBase:
			from = s.prev.Cut[name] // 0 for a successor segment
		case len(offs) > 0:
			from = offs[0] // a new epoch base: its first offset here
		default:
			from = end
		}
		want := from
		for _, o := range offs {
			if o < want {
				continue // a repeat of an offset: the reader returned it once already
			}
			if o > want && !s.covered(seg, want, o) {
				s.holes = append(s.holes, span{seg, want, o})
			}
			want = o + 1
		}
		if want < end && !s.covered(seg, want, end) {
			s.holes = append(s.holes, span{seg, want, end})
		}
	}
}

// covered reports whether a loss record covers offsets [from, to) of seg.
func (s *streamRead) covered(seg localstream.SegmentID, from, to uint64) bool {
	for _, l := range s.lost {
		key := strconv.FormatUint(uint64(seg), 10)
		lo, ok := l.From[key]
		if !ok || lo > from {
			continue
		}
		if l.To == nil {
			return true
		}
		if hi, ok := l.To[key]; ok && hi >= to {
			return true
		}
	}
	return false
}

func (s *streamRead) problem(format string, args ...any) {
	if len(s.problems) < 20 {
		s.problems = append(s.problems, s.name+": "+fmt.Sprintf(format, args...))
	}
}

// noteShed records the range a shed marker says was dropped, in central
// positions (the marker's are the store's: the epoch base is added).
func (s *streamRead) noteShed(payload []byte) {
	var g localstream.Gap
	if json.Unmarshal(payload, &g) != nil {
		return
	}
	central := func(p localstream.SegmentID) localstream.SegmentID {
		return localstream.NewSegmentID(p.Epoch()+s.base, p.Number())
	}
	from, to := central(g.From.Segment), central(g.To.Segment)
	if from == to {
		s.sheds = append(s.sheds, span{from, g.From.Offset, g.To.Offset + 1})
		return
	}
	// A shed across a scaling: the rest of From's segment, the start of To's.
	s.sheds = append(s.sheds, span{from, g.From.Offset, math.MaxUint64}, span{to, 0, g.To.Offset + 1})
}

// uncovered returns the holes no shed marker accounts for (yet). A shed
// marker's range counts only the data events it dropped: an earlier
// marker inside the range was dropped too and appended again (carried,
// docs/devices.md), with its own payload, so its old offset is in no
// range. Each shed marker seen therefore accounts for at most one offset
// outside every range.
func (s *streamRead) uncovered() []span {
	spare := uint64(len(s.sheds))
	var out []span
	for _, h := range s.holes {
		for o := h.from; o < h.to; o++ {
			if s.shedCovers(h.seg, o) {
				continue
			}
			if spare > 0 {
				spare--
				continue
			}
			if n := len(out); n > 0 && out[n-1].seg == h.seg && out[n-1].to == o {
				out[n-1].to++
			} else {
				out = append(out, span{h.seg, o, o + 1})
			}
		}
	}
	return out
}

func (s *streamRead) shedCovers(seg localstream.SegmentID, o uint64) bool {
	for _, sh := range s.sheds {
		if sh.seg == seg && sh.from <= o && o < sh.to {
			return true
		}
	}
	return false
}

// finish settles the report at the end of the read.
func (s *streamRead) finish() {
	for _, h := range s.uncovered() {
		s.problem("segment %s: offsets %d..%d missing without a gap marker", h.seg, h.from, h.to-1)
	}
	s.report.Problems = s.problems
	if s.report.Watermark.LowerNs <= s.toNs {
		s.report.Problems = append(s.report.Problems, fmt.Sprintf("%s: the committed watermark (%d) is not past the flight's end (%d): events may still arrive",
			s.name, s.report.Watermark.LowerNs, s.toNs))
	}
	s.report.Complete = len(s.report.Problems) == 0
}
