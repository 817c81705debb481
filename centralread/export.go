package centralread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
)

// ExportOptions select a drone's video between two times.
type ExportOptions struct {
	// Stream is the central video stream. Default "video".
	Stream string
	// Agent limits to one agent ("" = any).
	Agent string
	// Drone is the routing key. Required.
	Drone string
	// FromNs and ToNs bound the chunks' event times (first frame).
	FromNs, ToNs int64
}

// ExportStats describe what an export wrote.
type ExportStats struct {
	Chunks           int
	Bytes            int64
	FirstNs, LastNs  int64
	StartedAtKeyNs   int64
	SkippedBeforeKey int
}

// ExportVideo writes the drone's chunks from the keyframe chunk at or
// before FromNs through the last chunk starting at or before ToNs, as one
// Annex-B elementary stream (the chunks' payloads concatenated in order).
// Without a keyframe at or before FromNs it starts at the first keyframe
// after it.
//
// Without Agent, the drone's video must come from one agent: when chunks
// of more than one agent fall in the export, it stops writing and returns
// ErrSeveralAgents naming them all (w then holds a partial export, to be
// discarded) — one drone id seen by several stations is several
// recordings, not one clip.
func ExportVideo(ctx context.Context, nc *nats.Conn, o ExportOptions, w io.Writer) (ExportStats, error) {
	if o.Stream == "" {
		o.Stream = "video"
	}
	if o.Drone == "" || o.ToNs < o.FromNs {
		return ExportStats{}, fmt.Errorf("%w: export needs a drone and from ≤ to", ErrConfig)
	}
	r, err := NewCentralReader(ctx, nc, o.Stream, ReadOptions{Agent: o.Agent, RoutingKey: o.Drone})
	if err != nil {
		return ExportStats{}, err
	}
	var st ExportStats
	var pending [][]byte // from the latest keyframe at or before FromNs
	var pendingFirst int64
	var pendingAgent string
	var agents []string // the agents of the chunks in the export, in order
	started := false
	write := func(b []byte, t int64, agent string) error {
		if !slices.Contains(agents, agent) {
			agents = append(agents, agent)
		}
		if len(agents) > 1 {
			return nil // only finding the agents now
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if st.Chunks == 0 {
			st.FirstNs = t
		}
		st.Chunks++
		st.Bytes += int64(len(b))
		st.LastNs = t
		return nil
	}
	writePending := func() error {
		for _, p := range pending {
			if err := write(p, pendingFirst, pendingAgent); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, err
		}
		if it.Kind != ItemEvent || it.Event.Dropped != "" {
			continue // a marker has no video (its keyframe flag is the lost chunk's)
		}
		rec := it.Event.Record
		key := rec.Flags.Has(localstream.FlagKeyframe)
		t := rec.EventTime
		if !started {
			if t <= o.FromNs {
				if key {
					pending, pendingFirst, pendingAgent = [][]byte{rec.Payload}, t, it.Agent
				} else if pending != nil && it.Agent == pendingAgent {
					pending = append(pending, rec.Payload)
				}
				continue
			}
			started = true
			if pending == nil && !key {
				st.SkippedBeforeKey++
				started = false
				if t > o.ToNs {
					break
				}
				continue
			}
			st.StartedAtKeyNs = pendingFirst
			if pending == nil {
				st.StartedAtKeyNs = t
			}
			if err := writePending(); err != nil {
				return st, err
			}
		}
		if t > o.ToNs {
			break
		}
		if err := write(rec.Payload, t, it.Agent); err != nil {
			return st, err
		}
	}
	if !started && pending != nil {
		st.StartedAtKeyNs = pendingFirst
		if err := writePending(); err != nil {
			return st, err
		}
	}
	if len(agents) > 1 {
		slices.Sort(agents)
		return st, fmt.Errorf("%w: drone %s's video between %d and %d ns comes from agents %s: export one with --agent",
			ErrSeveralAgents, o.Drone, o.FromNs, o.ToNs, strings.Join(agents, ", "))
	}
	return st, nil
}
