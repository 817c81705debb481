package agent

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/edge-agent/edge-agent/devices"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
)

// deviceParts joins the drone registry, host health and disk pressure to
// the intake: the streams handed to video and telemetry are wrapped so that
// every durable append reaches the registry, and a drone that the
// registry finds silent has its watermark writers closed.
type deviceParts struct {
	a        *Agent
	registry *devices.Registry
	sampler  *devices.Sampler
	pressure *devices.Pressure
}

func newDeviceParts(a *Agent) (*deviceParts, error) {
	d := &deviceParts{a: a}
	reg, err := devices.NewRegistry(devices.RegistryConfig{
		OfflineAfter: a.cfg.Devices.OfflineAfter, MaxDrones: a.cfg.Devices.MaxDrones,
		OnOffline: func(drone, reason string) {
			// A silent drone stops holding the watermarks back; an explicit
			// offline already closed its telemetry writer.
			if t := a.trackers["video"]; t != nil {
				t.CloseWriter(video.WriterID(drone))
			}
			if t := a.trackers["telemetry"]; t != nil {
				t.CloseWriter(telemetry.WriterFor(drone))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	d.registry = reg
	if st := a.streams["health"]; st != nil && a.cfg.Devices.HealthInterval > 0 {
		d.sampler, err = devices.NewSampler(devices.HealthConfig{Agent: a.id, DataDir: a.cfg.DataDir,
			Interval: a.cfg.Devices.HealthInterval, Logger: a.log.With("part", "health")}, st, a.trackers["health"])
		if err != nil {
			return nil, err
		}
	}
	pc := a.cfg.Devices.Disk
	pc.Logger = a.log.With("part", "disk")
	if d.pressure, err = devices.NewPressure(a.store, pc); err != nil {
		return nil, err
	}
	return d, nil
}

// start runs the registry, the sampler and the disk-pressure loop.
func (d *deviceParts) start(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return ignoreCanceled(d.registry.Run(ctx)) })
	if d.sampler != nil {
		g.Go(func() error { return ignoreCanceled(d.sampler.Run(ctx)) })
	}
	g.Go(func() error { return ignoreCanceled(d.pressure.Run(ctx)) })
	// Keep the local watermarks current for /status and /metrics.
	g.Go(func() error {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				for _, tr := range d.a.trackers {
					tr.Local()
				}
			}
		}
	})
}

// videoSink is the video stream seen through the registry.
func (d *deviceParts) videoSink(st *localstream.Stream) video.Appender { return d.registry.Observe(st) }

// telemetrySink is the telemetry stream seen through the registry.
func (d *deviceParts) telemetrySink(st *localstream.Stream) telemetry.Appender {
	return d.registry.ObserveAsync(st)
}

// mavlinkSink is telemetrySink for the MAVLink intake's groups.
func (d *deviceParts) mavlinkSink(st *localstream.Stream) mavlink.Appender {
	return d.registry.ObserveGroup(st)
}

// telemetryMarks marks a drone offline in the registry when telemetry closes its writer.
func (d *deviceParts) telemetryMarks(m devices.Marks) devices.Marks {
	return d.registry.ObserveOffline(m)
}

// status is the devices part of /status.
func (d *deviceParts) status() any {
	return devices.NewStatus(d.registry, d.sampler, d.pressure)
}

func ignoreCanceled(err error) error {
	if err == context.Canceled {
		return nil
	}
	return err
}
