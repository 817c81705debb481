package flight

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/centralread"
)

// Check is what a flight's certificate would say of it, without its
// record: whether it is complete, why not, and each stream's report.
type Check struct {
	Flight  Flight
	Status  string
	Reasons []string
	Streams []StreamReport
}

// CheckFlights checks many flights in one read of each stream: every
// agent's telemetry, video and health streams are read once from the
// start, and each item goes to the check of every flight of that agent
// that is still reading (as Export's own read of the stream would have
// seen it). A Check says what Export's certificate of the flight says
// (status, reasons, streams); `edge-agent flights` lists them. Checks
// are in the order of fl.
func CheckFlights(ctx context.Context, nc *nats.Conn, fl []Flight, o FindOptions) ([]Check, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	byAgent := map[string][]int{}
	var agents []string
	for i, f := range fl {
		if byAgent[f.Agent] == nil {
			agents = append(agents, f.Agent)
		}
		byAgent[f.Agent] = append(byAgent[f.Agent], i)
	}
	reads := make([][]*streamRead, len(fl)) // per flight, in Export's order
	for _, agent := range agents {
		idx := byAgent[agent]
		for _, st := range []struct {
			name   string
			health bool
		}{{o.Streams.Telemetry, false}, {o.Streams.Video, false}, {o.Streams.Health, true}} {
			if st.name == "" {
				continue
			}
			srs := make([]*streamRead, len(idx))
			for k, i := range idx {
				key := fl[i].Drone
				if st.health {
					key = agent
				}
				srs[k] = newStreamRead(st.name, agent, key, fl[i])
			}
			err := sweep(ctx, nc, st.name, agent, srs)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				continue // as Export: the stream is not in the record
			}
			if err != nil {
				return nil, err
			}
			for k, i := range idx {
				reads[i] = append(reads[i], srs[k])
			}
		}
	}
	out := make([]Check, len(fl))
	for i, f := range fl {
		out[i].Flight = f
		out[i].Status, out[i].Reasons, out[i].Streams = judge(f, reads[i])
	}
	return out, nil
}

// sweep reads one stream of agent from the start until every check in
// srs is done with it (or the stream ends), giving each item to those
// still reading.
func sweep(ctx context.Context, nc *nats.Conn, stream, agent string, srs []*streamRead) error {
	r, err := centralread.NewCentralReader(ctx, nc, stream, centralread.ReadOptions{Agent: agent})
	if err != nil {
		return fmt.Errorf("flight: open %s: %w", stream, err)
	}
	defer r.Close(context.WithoutCancel(ctx))
	for reading := len(srs); reading > 0; {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			for _, s := range srs {
				if !s.done {
					s.finish()
				}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("flight: read %s: %w", stream, err)
		}
		reading = 0
		for _, s := range srs {
			if !s.done {
				s.sift(it)
			}
			if !s.done {
				reading++
			}
		}
	}
	return nil
}
