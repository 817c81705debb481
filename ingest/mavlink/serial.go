package mavlink

import (
	"context"
	"time"

	"go.bug.st/serial"
)

// SerialPort is one serial link: a telemetry radio (SiK, RFD900) or a
// flight controller's USB port.
type SerialPort struct {
	// Device is the port's path, e.g. /dev/ttyUSB0. Required.
	Device string `yaml:"device"`
	// Baud is its bit rate. Default 57600 (SiK radios).
	Baud int `yaml:"baud"`
}

// readSerial reads frames from a serial port until ctx ends, opening it
// again a second after it fails or goes away (a radio unplugged).
func (in *Intake) readSerial(ctx context.Context, p SerialPort) {
	warned := false
	for ctx.Err() == nil {
		port, err := serial.Open(p.Device, &serial.Mode{BaudRate: p.Baud})
		if err == nil {
			warned = false
			in.c.connections.Add(1)
			stop := context.AfterFunc(ctx, func() { port.Close() })
			in.readStream(port, in.consume)
			stop()
			port.Close()
			in.c.connectionsLost.Add(1)
		} else {
			in.c.readErrors.Add(1)
			if !warned { // once per outage: the port may stay away for hours
				in.cfg.Logger.Warn("mavlink: serial port", "device", p.Device, "err", err)
				warned = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
