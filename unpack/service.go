package unpack

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// Service runs one Unpacker per central stream and partition
// (Options.Partitions, Options.Only): the streams named, or
// every EDGE_<STREAM> found (looked for again every
// Options.DiscoverInterval). New streams get an unpacker as they appear.
// Stats is safe for concurrent use.
type Service struct {
	nc      *nats.Conn
	streams []string
	opts    Options

	mu sync.Mutex
	// running are the unpackers started, in start order. Guarded by mu.
	running []*Unpacker
}

// NewService returns the service of streams (none: every central
// stream) on nc. It starts nothing.
func NewService(nc *nats.Conn, streams []string, opts Options) (*Service, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	for _, s := range streams {
		if err := localstream.ValidateStreamName(s); err != nil {
			return nil, err
		}
	}
	return &Service{nc: nc, streams: slices.Clone(streams), opts: opts}, nil
}

// Run runs the unpackers until ctx ends (nil) or one stops with a
// permanent error (that error; the others are stopped).
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	started := map[string]bool{}
	start := func(stream string) error {
		if started[stream] {
			return nil
		}
		var us []*Unpacker
		for _, p := range s.partitions(stream) {
			u, err := NewPartition(s.nc, p, s.opts)
			if err != nil {
				return err
			}
			us = append(us, u)
		}
		started[stream] = true
		s.mu.Lock()
		s.running = append(s.running, us...)
		s.mu.Unlock()
		for _, u := range us {
			s.opts.Logger.Info("unpack: unpacking", "source", wire.StreamName(u.stream), "derived", u.part.StreamName())
			g.Go(func() error { return u.Run(gctx) })
		}
		return nil
	}
	for _, st := range s.streams {
		if err := start(st); err != nil {
			return err
		}
	}
	if len(s.streams) == 0 {
		g.Go(func() error {
			for gctx.Err() == nil {
				for _, st := range discover(gctx, s.nc, s.opts) {
					if err := start(st); err != nil {
						return err
					}
				}
				sleep(gctx, s.opts.DiscoverInterval)
			}
			return nil
		})
	}
	return g.Wait()
}

// partitions are the partitions of stream the service runs
// (Options.Partitions, Options.Only).
func (s *Service) partitions(stream string) []Partition {
	all := Partitions(stream, s.opts.Partitions)
	if len(s.opts.Only) == 0 {
		return all
	}
	var out []Partition
	for _, p := range all {
		if slices.Contains(s.opts.Only, p.Index) {
			out = append(out, p)
		}
	}
	return out
}

// Stats returns each running unpacker's counters.
func (s *Service) Stats() []Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Stats, 0, len(s.running))
	for _, u := range s.running {
		out = append(out, u.Stats())
	}
	return out
}

// discover lists the local stream names of the central streams
// (EDGE_<STREAM> with the subjects edge.<stream>.>). A failed listing is
// logged and yields what was listed.
func discover(ctx context.Context, nc *nats.Conn, opts Options) []string {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
	defer cancel()
	var out []string
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		name, ok := strings.CutPrefix(info.Config.Name, "EDGE_")
		local := strings.ToLower(name)
		if !ok || localstream.ValidateStreamName(local) != nil || !slices.Contains(info.Config.Subjects, "edge."+local+".>") {
			continue
		}
		out = append(out, local)
	}
	if err := l.Err(); err != nil && ctx.Err() == nil {
		opts.Logger.Warn("unpack: listing the central streams", "err", err)
	}
	slices.Sort(out)
	return out
}
