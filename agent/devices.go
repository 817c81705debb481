package agent

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// deviceParts joins the drone registry, host health and disk pressure to
// the intake: it decorates the streams and trackers handed to video and
// telemetry so that every durable append and every closed writer reaches
// the registry.
type deviceParts struct {
	a *Agent
}

func newDeviceParts(a *Agent) *deviceParts { return &deviceParts{a: a} }

func (d *deviceParts) start(ctx context.Context, g *errgroup.Group) error { return nil }

// appender returns the stream the intake appends to.
func (d *deviceParts) appender(st *localstream.Stream, source string) *localstream.Stream { return st }

// marks returns the tracker the intake notes marks with.
func (d *deviceParts) marks(t *watermark.Tracker) *watermark.Tracker { return t }

// status is the devices part of /status.
func (d *deviceParts) status() any { return nil }
