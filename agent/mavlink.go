package agent

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sync/errgroup"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
)

// MAVLinkConfig configures MAVLink capture (docs/mavlink.md): frames are
// stored byte for byte in the telemetry stream, a drone per system id.
type MAVLinkConfig struct {
	// Enabled turns MAVLink capture on. Default false.
	Enabled bool `yaml:"enabled"`
	// Config is the mavlink package's configuration (endpoints, drones,
	// rates, signing, bounds). The agent's defaults are the package's,
	// with udp_listen 0.0.0.0:14550 (where a GCS listens).
	mavlink.Config `yaml:",inline"`
}

func defaultMAVLink() mavlink.Config {
	c := mavlink.NewDefaultConfig()
	c.UDPListen = "0.0.0.0:14550"
	// Empty, not nil: as the YAML's [] and {} decode (agent.example.yaml).
	c.UDPConnect, c.TCPConnect = []string{}, []string{}
	c.Drones, c.Rates = map[uint8]string{}, map[string]float64{}
	return c
}

func (c MAVLinkConfig) validate() error {
	if !c.Enabled {
		return nil
	}
	if err := c.Config.Validate(); err != nil {
		return nested("mavlink", err, mavlink.ErrConfig)
	}
	return nil
}

// newMAVLink builds the MAVLink intake on the telemetry stream and binds
// its sockets (an address in use is a config error before any part starts).
func (a *Agent) newMAVLink(d *deviceParts) error {
	st, tr := a.streams["telemetry"], a.trackers["telemetry"]
	if st == nil {
		return fmt.Errorf("%w: mavlink.enabled needs a streams.telemetry entry", ErrConfig)
	}
	mc := a.cfg.MAVLink.Config
	mc.Logger = a.log.With("part", "mavlink")
	in, err := mavlink.New(mc, mavlink.Sink{Stream: d.mavlinkSink(st), Marks: tr, Meta: st.Store()})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := in.Bind(); err != nil {
		return fmt.Errorf("%w: mavlink: %w (another server there?): choose another HOST:PORT", ErrConfig, err)
	}
	a.mavlink = in
	return nil
}

// startMAVLink runs the intake built by newMAVLink, if any.
func (a *Agent) startMAVLink(ctx context.Context, g *errgroup.Group) {
	in := a.mavlink
	if in == nil {
		return
	}
	g.Go(func() error { return in.Run(ctx) })
	select {
	case <-in.Ready():
	case <-ctx.Done():
	}
}

// MAVLinkUDPAddr is the MAVLink UDP server's address (nil when off).
func (a *Agent) MAVLinkUDPAddr() net.Addr {
	if a.mavlink == nil {
		return nil
	}
	return a.mavlink.UDPAddr()
}

// MAVLinkTCPAddr is the MAVLink TCP server's address (nil when off).
func (a *Agent) MAVLinkTCPAddr() net.Addr {
	if a.mavlink == nil {
		return nil
	}
	return a.mavlink.TCPAddr()
}
