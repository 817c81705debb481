package unpack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/centralread"
)

// StreamStart is where a consumer of one stream starts after a time cut
// (see docs/unpack.md): the messages before StartSeq hold every non-late
// event with time ≤ T of every agent in the cut.
type StreamStart struct {
	// Stream is the local stream name.
	Stream string `json:"stream"`
	// Complete is set when every agent's cut of the stream is; the
	// sequences are set only then.
	Complete bool `json:"complete"`
	// StartSeq is the sequence in EDGE_<STREAM> after the last agent's
	// cut commit record.
	StartSeq uint64 `json:"start_seq,omitempty"`
	// EventsStartSeq is the first sequence in EDGEEV_<STREAM> whose
	// source sequence is StartSeq or later (0: the unpacker is not there
	// yet, or there is no derived stream, or it has partitions).
	EventsStartSeq uint64 `json:"events_start_seq,omitempty"`
	// Partitions is the same point in each partition's derived stream,
	// when the stream has more than one (Options.Partitions).
	Partitions []PartitionStart `json:"partitions,omitempty"`
}

// PartitionStart is a StreamStart's point in one partition's derived
// stream.
type PartitionStart struct {
	// Derived is the partition's stream, EDGEEV_<STREAM>_P<i>.
	Derived string `json:"derived"`
	// EventsStartSeq is its first sequence whose source sequence is
	// StartSeq or later (0: its unpacker is not there yet).
	EventsStartSeq uint64 `json:"events_start_seq,omitempty"`
}

// Starts returns each stream's start after cut, in the cut's stream
// order, looking the derived sequences up on nc.
func Starts(ctx context.Context, nc *nats.Conn, cut centralread.TimeCut) ([]StreamStart, error) {
	var out []StreamStart
	idx := map[string]int{}
	for _, c := range cut.Streams {
		i, ok := idx[c.Stream]
		if !ok {
			i = len(out)
			idx[c.Stream] = i
			out = append(out, StreamStart{Stream: c.Stream, Complete: true})
		}
		s := &out[i]
		s.Complete = s.Complete && c.Complete
		s.StartSeq = max(s.StartSeq, c.Seq+1)
	}
	var errs []error
	for i := range out {
		s := &out[i]
		if !s.Complete {
			s.StartSeq = 0
			continue
		}
		parts, err := FindPartitions(ctx, nc, s.Stream)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range parts {
			seq, err := derivedAtOrAfter(ctx, nc, p, s.StartSeq)
			if err != nil {
				errs = append(errs, err)
			}
			if p.partitioned() {
				s.Partitions = append(s.Partitions, PartitionStart{Derived: p.StreamName(), EventsStartSeq: seq})
			} else {
				s.EventsStartSeq = seq
			}
		}
	}
	slices.SortStableFunc(out, func(a, b StreamStart) int { return idx[a.Stream] - idx[b.Stream] })
	return out, errors.Join(errs...)
}

// FindPartitions returns the derived streams of stream at the centre:
// EDGEEV_<STREAM> alone, or the partitions of EDGEEV_<STREAM>_P0's count
// (its metadata), or none.
func FindPartitions(ctx context.Context, nc *nats.Conn, stream string) ([]Partition, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	whole := Partition{Stream: stream}
	_, err = js.Stream(ctx, whole.StreamName())
	if err == nil {
		return []Partition{whole}, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("unpack: %s: %w", whole.StreamName(), err)
	}
	p0 := Partition{Stream: stream, Count: 2}
	st, err := js.Stream(ctx, p0.StreamName())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("unpack: %s: %w", p0.StreamName(), err)
	}
	n, err := strconv.Atoi(st.CachedInfo().Config.Metadata[metaPartitions])
	if err != nil || n < 2 || n > MaxPartitions {
		return nil, fmt.Errorf("%w: %s has metadata %s=%q", ErrDerivedMisconfigured, p0.StreamName(), metaPartitions, st.CachedInfo().Config.Metadata[metaPartitions])
	}
	return Partitions(stream, n), nil
}

// derivedAtOrAfter finds, by binary search over the partition's derived
// stream, the first derived sequence whose source sequence is src or
// later (0: none yet, or no derived stream).
func derivedAtOrAfter(ctx context.Context, nc *nats.Conn, p Partition, src uint64) (uint64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	name := p.StreamName()
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("unpack: %s: %w", name, err)
	}
	state := st.CachedInfo().State
	lo, hi := state.FirstSeq, state.LastSeq
	if hi == 0 {
		return 0, nil
	}
	filter := p.Subjects()
	// The first message at or after n and its source sequence.
	at := func(n uint64) (uint64, uint64, bool, error) {
		seq, pos, _, found, err := getDerived(ctx, nc, name, map[string]any{"seq": n, "next_by_subj": filter})
		return seq, pos.seq, found, err
	}
	if _, s, found, err := at(hi); err != nil || !found || s < src {
		return 0, err
	}
	// pred(n): the first message at or after n comes from src or later;
	// monotone in n and true at hi. Find the least such n.
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, s, found, err := at(mid)
		if err != nil {
			return 0, err
		}
		if found && s >= src {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	seq, _, _, err := at(lo)
	return seq, err
}
