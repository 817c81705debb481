package broker

import (
	"fmt"
	"log/slog"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// embedded is the mochi-mqtt fallback used only when mosquitto is absent.
// It keeps sessions in memory: they do not survive Restart.
type embedded struct {
	// srv is the running server.
	srv *mqtt.Server
}

func startEmbedded(addr string) (*embedded, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumInflight = 65535
	caps.ReceiveMaximum = 65535
	caps.MaximumClientWritesPending = 64 * 1024
	srv := mqtt.New(&mqtt.Options{
		Capabilities: caps,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, fmt.Errorf("broker: embedded hook: %w", err)
	}
	if err := srv.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})); err != nil {
		return nil, fmt.Errorf("broker: embedded listener: %w", err)
	}
	if err := srv.Serve(); err != nil {
		return nil, fmt.Errorf("broker: embedded serve: %w", err)
	}
	return &embedded{srv: srv}, nil
}

func (e *embedded) close() error { return e.srv.Close() }
