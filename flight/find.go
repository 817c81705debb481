package flight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
)

// Streams name the central streams a record reads.
type Streams struct {
	Telemetry, Video, Health string
}

// DefaultStreams are the agent's default stream names.
func DefaultStreams() Streams {
	return Streams{Telemetry: "telemetry", Video: "video", Health: "health"}
}

// FindOptions select whose flights Find finds.
type FindOptions struct {
	// Drone is the routing key. Required.
	Drone string
	// Agent limits to one agent ("": every agent that captured the drone;
	// each agent's capture is its own flights).
	Agent string
	// Rule says how MQTT drones' flights are found.
	Rule Rule
	// Streams name the central streams (zero: DefaultStreams).
	Streams Streams
}

func (o *FindOptions) setDefaults() error {
	if o.Drone == "" {
		return fmt.Errorf("%w: a drone is required", ErrConfig)
	}
	if o.Streams == (Streams{}) {
		o.Streams = DefaultStreams()
	}
	if o.Rule.Silence <= 0 {
		o.Rule.Silence = DefaultSilence
	}
	return nil
}

// droneScan finds one agent's flights of a drone: MAVLink heartbeats when
// there are any, else the MQTT rule.
type droneScan struct {
	mav     *detector
	mqtt    *detector
	sawBeat bool
}

// Find returns the drone's flights in time order, numbered from 1, from
// its telemetry at the centre.
func Find(ctx context.Context, nc *nats.Conn, o FindOptions) ([]Flight, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	mqttRule := "silence:" + o.Rule.Silence.String()
	var silence = o.Rule.Silence
	if o.Rule.ArmedField != "" {
		mqttRule, silence = "field:"+o.Rule.ArmedField, 0
	}
	dec, err := newMavDecoder()
	if err != nil {
		return nil, err
	}
	scans := map[string]*droneScan{}
	r, err := centralread.NewCentralReader(ctx, nc, o.Streams.Telemetry, centralread.ReadOptions{Agent: o.Agent, RoutingKey: o.Drone})
	if err != nil {
		return nil, fmt.Errorf("flight: read %s: %w", o.Streams.Telemetry, err)
	}
	defer r.Close(context.WithoutCancel(ctx))
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("flight: read %s: %w", o.Streams.Telemetry, err)
		}
		rec := &it.Event.Record
		if it.Kind != centralread.ItemEvent || rec.RoutingKey != o.Drone || it.Event.Dropped != "" {
			continue
		}
		sc := scans[it.Agent]
		if sc == nil {
			sc = &droneScan{mav: newDetector("mavlink-armed", 0), mqtt: newDetector(mqttRule, silence)}
			scans[it.Agent] = sc
		}
		t := eventTime(rec)
		if m := dec.decode(rec); m != nil {
			if air, ok := mavAirborne(m); ok {
				sc.sawBeat = true
				sc.mav.observe(observation{atNs: t, airborne: air})
			}
			continue
		}
		if rec.ContentType == mavlink.ContentType {
			continue
		}
		if o.Rule.ArmedField == "" {
			sc.mqtt.observe(observation{atNs: t, airborne: true})
		} else if air, ok := jsonAirborne(rec.Payload, o.Rule.ArmedField); ok {
			sc.mqtt.observe(observation{atNs: t, airborne: air})
		}
	}
	var out []Flight
	for agent, sc := range scans {
		d := sc.mqtt
		if sc.sawBeat {
			d = sc.mav
		}
		for _, f := range d.flights() {
			f.Drone, f.Agent = o.Drone, agent
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b Flight) int {
		if a.StartNs != b.StartNs {
			return cmpInt(a.StartNs, b.StartNs)
		}
		return strings.Compare(a.Agent, b.Agent)
	})
	for i := range out {
		out[i].N = i + 1
	}
	return out, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// agentsIn returns the agents whose stream holds events of key between
// from and to.
func agentsIn(ctx context.Context, nc *nats.Conn, stream, key string, from, to int64) ([]string, error) {
	r, err := centralread.NewCentralReader(ctx, nc, stream, centralread.ReadOptions{RoutingKey: key, CommitsOnly: false})
	if err != nil {
		return nil, err
	}
	defer r.Close(context.WithoutCancel(ctx))
	seen := map[string]bool{}
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if it.Kind == centralread.ItemEvent && it.Event.Record.RoutingKey == key {
			if t := eventTime(&it.Event.Record); t >= from && t <= to {
				seen[it.Agent] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	slices.Sort(out)
	return out, nil
}
