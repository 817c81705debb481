package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// rateLimited is a slog.Handler that lets through at most burst records
// with the same message and level per interval; the rest are counted and
// reported on the next record that passes ("suppressed": n). Debug and
// info records pass unchanged: the limit is for repeating warnings and
// errors (a broken link, a misbehaving drone).
type rateLimited struct {
	next     slog.Handler
	interval time.Duration
	burst    int
	now      func() time.Time
	state    *rlState
}

type rlState struct {
	mu      sync.Mutex
	windows map[string]*rlWindow
}

type rlWindow struct {
	start      time.Time
	n          int
	suppressed int
}

// RateLimit wraps h so that repeating warnings and errors are limited to
// burst per interval per message.
func RateLimit(h slog.Handler, interval time.Duration, burst int, now func() time.Time) slog.Handler {
	if now == nil {
		now = time.Now
	}
	return &rateLimited{next: h, interval: interval, burst: burst, now: now, state: &rlState{windows: map[string]*rlWindow{}}}
}

func (r *rateLimited) Enabled(ctx context.Context, l slog.Level) bool { return r.next.Enabled(ctx, l) }

func (r *rateLimited) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelWarn {
		return r.next.Handle(ctx, rec)
	}
	key := rec.Level.String() + "\x00" + rec.Message
	now := r.now()
	r.state.mu.Lock()
	w := r.state.windows[key]
	if w == nil || now.Sub(w.start) >= r.interval {
		if len(r.state.windows) > 4096 { // bound the table
			clear(r.state.windows)
		}
		prev := 0
		if w != nil {
			prev = w.suppressed
		}
		w = &rlWindow{start: now, suppressed: prev}
		r.state.windows[key] = w
	}
	w.n++
	if w.n > r.burst {
		w.suppressed++
		r.state.mu.Unlock()
		return nil
	}
	sup := w.suppressed
	w.suppressed = 0
	r.state.mu.Unlock()
	if sup > 0 {
		rec = rec.Clone()
		rec.AddAttrs(slog.Int("suppressed", sup))
	}
	return r.next.Handle(ctx, rec)
}

func (r *rateLimited) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	c.next = r.next.WithAttrs(as)
	return &c
}

func (r *rateLimited) WithGroup(name string) slog.Handler {
	c := *r
	c.next = r.next.WithGroup(name)
	return &c
}
