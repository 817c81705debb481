package devices

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// clock is an injected, manually advanced clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// recMarks records what the sampler and wrappers tell a watermark tracker.
type recMarks struct {
	mu     sync.Mutex
	notes  []note
	closed []string
}

type note struct {
	writer string
	t      int64
	pos    localstream.Position
}

func (m *recMarks) Admit(string, int64, int64) watermark.Admission { return watermark.Admission{} }

func (m *recMarks) NoteAdmitted(w string, a watermark.Admission, t int64, p localstream.Position) error {
	t = a.Mark(t)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.notes = append(m.notes, note{w, t, p})
	return nil
}

func (m *recMarks) CloseWriter(w string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = append(m.closed, w)
	return nil
}

func (m *recMarks) Notes() []note {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]note(nil), m.notes...)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// readAll reads a stream from its head to its tail.
func readAll(t testing.TB, st *localstream.Stream) []localstream.Record {
	t.Helper()
	recs, err := st.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
