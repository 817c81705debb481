package centralread

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
)

// Query is a bounded or following read of a central stream, the logic of
// `edge-agent read`.
type Query struct {
	// ReadOptions select agent, drone, follow.
	ReadOptions
	// FromTimeNs drops events with an earlier event time (0 = none).
	FromTimeNs int64
	// ToTimeNs drops later events and ends the read once the agent's
	// committed watermark lower passes it: no event before it can follow
	// (0 = none).
	ToTimeNs int64
	// FromCut starts after the agent's commit record with this cut;
	// ToCut ends with the commit record with this cut. They need Agent.
	FromCut, ToCut *localstream.StreamCut
	// Commits also emits commit records.
	Commits bool
}

// RunQuery reads stream and calls emit for every selected item in order.
func RunQuery(ctx context.Context, nc *nats.Conn, stream string, q Query, emit func(Item) error) error {
	if (q.FromCut != nil || q.ToCut != nil) && q.Agent == "" {
		return fmt.Errorf("%w: a from/to cut needs the agent", ErrConfig)
	}
	if q.FromCut != nil {
		seq, err := findCommit(ctx, nc, stream, q.Agent, *q.FromCut)
		if err != nil {
			return err
		}
		q.StartSeq = seq + 1
	}
	r, err := NewCentralReader(ctx, nc, stream, q.ReadOptions)
	if err != nil {
		return err
	}
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch it.Kind {
		case ItemCommit:
			if q.Commits {
				if err := emit(it); err != nil {
					return err
				}
			}
			if q.ToCut != nil {
				if c, err := it.Commit.StreamCut(); err == nil && c.Equal(*q.ToCut) {
					return nil
				}
			}
			if q.ToTimeNs > 0 && it.Commit.Watermark.LowerNs > q.ToTimeNs {
				return nil
			}
		case ItemEvent:
			t := it.Event.Record.EventTime
			if q.FromTimeNs > 0 && t < q.FromTimeNs || q.ToTimeNs > 0 && t > q.ToTimeNs {
				continue
			}
			if err := emit(it); err != nil {
				return err
			}
		}
	}
}

// findCommit returns the sequence of the agent's commit record with cut.
func findCommit(ctx context.Context, nc *nats.Conn, stream, agent string, cut localstream.StreamCut) (uint64, error) {
	r, err := NewCentralReader(ctx, nc, stream, ReadOptions{Agent: agent, CommitsOnly: true})
	if err != nil {
		return 0, err
	}
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%w: no commit of agent %s at cut %s", ErrConfig, agent, cut)
		}
		if err != nil {
			return 0, err
		}
		if c, err := it.Commit.StreamCut(); err == nil && c.Equal(cut) {
			return it.Seq, nil
		}
	}
}
