package localstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// badgerLogEvery bounds how often one of Badger's messages is logged: on
// a failing disk Badger retries its memtable flush every second, forever,
// with an error each time.
const badgerLogEvery = 30 * time.Second

// badgerLogger routes Badger's warnings and errors to slog, each message
// (by its format: the file names and numbers in it change at every retry)
// at most once per badgerLogEvery, with the count of the ones held back.
// It is safe for concurrent use.
type badgerLogger struct {
	l   *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	seen map[string]*badgerLogged // by format
}

// badgerLogged is one format's last logging and what was held back since.
type badgerLogged struct {
	at   time.Time
	held int
}

func newBadgerLogger(l *slog.Logger, now func() time.Time) *badgerLogger {
	return &badgerLogger{l: l, now: now, seen: map[string]*badgerLogged{}}
}

// log logs f unless it was logged within badgerLogEvery; it returns
// whether it did.
func (b *badgerLogger) log(level slog.Level, f string, a ...any) bool {
	b.mu.Lock()
	now := b.now()
	e := b.seen[f]
	if e != nil && now.Sub(e.at) < badgerLogEvery {
		e.held++
		b.mu.Unlock()
		return false
	}
	held := 0
	if e == nil {
		if len(b.seen) >= 256 { // formats are Badger's constants: bounded anyway
			clear(b.seen)
		}
		e = &badgerLogged{}
		b.seen[f] = e
	}
	held, e.at, e.held = e.held, now, 0
	b.mu.Unlock()
	args := []any{}
	if held > 0 {
		args = append(args, "repeated", held, "in", badgerLogEvery.String())
	}
	b.l.Log(context.Background(), level, "badger: "+fmt.Sprintf(f, a...), args...)
	return true
}

func (b *badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a...) }
func (b *badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a...) }
func (b *badgerLogger) Infof(string, ...any)        {}
func (b *badgerLogger) Debugf(string, ...any)       {}
