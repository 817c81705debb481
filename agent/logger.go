package agent

import (
	"context"
	"io"
	"log/slog"
	"time"
)

// NewLogger returns the slog logger of the configuration. Repeating
// warnings and errors are limited to 5 per minute per message.
func NewLogger(c LogConfig, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: logValue}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	// URLs lose their passwords here already; Agent adds the literal
	// secrets of its configuration.
	return slog.New(RateLimit(NewRedactor().Handler(h), time.Minute, 5, nil))
}

// minLevel drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(as), m.min}
}
func (m minLevel) WithGroup(n string) slog.Handler { return minLevel{m.Handler.WithGroup(n), m.min} }
