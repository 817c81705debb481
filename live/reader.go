package live

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edge-agent/edge-agent/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Value is a drone's latest live value at the centre.
type Value struct {
	// Agent, Stream and Drone name it.
	Agent  string `json:"agent"`
	Stream string `json:"stream"`
	Drone  string `json:"drone"`
	// Writer and ContentType are the event's.
	Writer      string `json:"writer"`
	ContentType string `json:"content_type,omitempty"`
	// Segment and Offset are the event's local position at the agent.
	Segment uint64 `json:"segment"`
	Offset  uint64 `json:"offset"`
	// EventTimeNs, IngestTimeNs and SentTimeNs are Unix ns: the event's
	// time (video: the keyframe's PTS; 0: unknown), when the agent
	// received it and when the lane sent it.
	EventTimeNs  int64 `json:"event_time_ns"`
	IngestTimeNs int64 `json:"ingest_time_ns"`
	SentTimeNs   int64 `json:"sent_time_ns"`
	// Age is how old the value is at the read: now − event time (ingest
	// time when the event time is unknown).
	Age time.Duration `json:"age_ns"`
	// Keyframe marks a video keyframe access unit.
	Keyframe bool `json:"keyframe,omitempty"`
	// Covered is set when the stream's committed watermark at the centre
	// (CommittedLowerNs) has passed the value's time: the backlog holds
	// the event too, exactly once, and a consumer should read it there.
	Covered          bool  `json:"covered"`
	CommittedLowerNs int64 `json:"committed_lower_ns"`
	// Payload is the event's bytes (video: the keyframe's Annex-B bytes).
	Payload []byte `json:"-"`
	// Seq is the message's sequence in EDGELIVE.
	Seq uint64 `json:"seq"`
}

// Time is the value's time: its event time, else its ingest time.
func (v Value) Time() int64 { return cmp.Or(v.EventTimeNs, v.IngestTimeNs) }

// ReadOptions select what Read returns; an empty field matches all.
type ReadOptions struct {
	Agent, Stream, Drone string
	// Now is the clock ages are taken against. Default time.Now.
	Now func() time.Time
}

// Read returns the latest live value of every drone that matches opts,
// ordered by agent, stream and drone, each with its age and whether the
// backlog covers it. ErrNoLiveStream: no agent has sent a live value yet.
func Read(ctx context.Context, nc *nats.Conn, opts ReadOptions) ([]Value, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoLiveStream
	}
	if err != nil {
		return nil, fmt.Errorf("live: read: %w", err)
	}
	f := filter(opts.Agent, opts.Stream, opts.Drone)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(f))
	if err != nil {
		return nil, fmt.Errorf("live: read: %w", err)
	}
	var out []Value
	for subj := range info.State.Subjects {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // its TTL ran out meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("live: read %s: %w", subj, err)
		}
		v, err := decode(m.Subject, m.Header, m.Data)
		if err != nil {
			return nil, err
		}
		v.Seq = m.Sequence
		out = append(out, v)
	}
	now := opts.Now()
	lowers := map[[2]string]int64{}
	for i := range out {
		v := &out[i]
		k := [2]string{v.Agent, v.Stream}
		lower, ok := lowers[k]
		if !ok {
			if lower, err = committedLower(ctx, js, v.Agent, v.Stream); err != nil {
				return nil, err
			}
			lowers[k] = lower
		}
		v.CommittedLowerNs = lower
		v.Covered = v.Time() > 0 && lower > v.Time()
		if t := v.Time(); t > 0 {
			v.Age = now.Sub(time.Unix(0, t))
		}
	}
	slices.SortFunc(out, func(a, b Value) int {
		return cmp.Or(cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Drone, b.Drone))
	})
	return out, nil
}

// committedLower is the committed watermark lower of agent's stream at
// the centre (0: nothing committed yet).
func committedLower(ctx context.Context, js jetstream.JetStream, agent, stream string) (int64, error) {
	s, err := js.Stream(ctx, wire.StreamName(stream))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("live: read committed watermark of %s: %w", stream, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, wire.CutSubject(stream, agent))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("live: read committed watermark of %s: %w", stream, err)
	}
	_, rec, err := wire.DecodeMessage(m.Subject, m.Header, m.Data)
	if err != nil {
		return 0, fmt.Errorf("live: read committed watermark of %s: %w", stream, err)
	}
	if rec == nil {
		return 0, nil
	}
	return rec.Watermark.LowerNs, nil
}
