package watermark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// fakeClock is an injected clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openStore(t testing.TB, dir string) (*localstream.Store, *localstream.Stream) {
	t.Helper()
	return rigs.OpenStream(t, dir, localstream.Options{MinFreeBytes: -1}, "video",
		localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}})
}

// ingest does what an ingest does per event: Late, append (flagged), Note.
func ingest(ctx context.Context, st *localstream.Stream, tr *Tracker, writer, key string, et int64) (localstream.Position, bool, error) {
	late := tr.Late(writer, et)
	ev := localstream.Event{RoutingKey: key, Writer: writer, EventTime: et, IngestTime: et, Payload: []byte("x")}
	if late {
		ev.Flags |= localstream.FlagLate
	}
	pos, err := st.Append(ctx, ev)
	if err != nil {
		return pos, late, err
	}
	if err := tr.Note(writer, et, pos); err != nil && !errors.Is(err, ErrTimeBackwards) {
		return pos, late, err
	}
	return pos, late, nil
}

// readAll returns every durable record of st.
func readAll(t testing.TB, st *localstream.Stream) []localstream.Record {
	t.Helper()
	recs, err := st.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// checkAgainstRecords checks property (a) on real records: no non-late
// event outside w's cut is earlier than w's lower bound.
func checkAgainstRecords(t testing.TB, st *localstream.Stream, w Watermark, what string) int {
	t.Helper()
	topo := st.Topology()
	outside := 0
	for _, rec := range readAll(t, st) {
		in, err := topo.Contains(w.Cut, rec.Position)
		if err != nil {
			t.Fatal(err)
		}
		if in || rec.Flags.Has(localstream.FlagLate) || rec.Flags.Has(localstream.FlagGap) || rec.EventTime == 0 {
			continue // gap markers and events without a time are outside the promise
		}
		outside++
		if rec.EventTime < w.LowerNs {
			t.Errorf("%s watermark %s passes non-late event of %s at %s time %d", what, w, rec.Writer, rec.Position, rec.EventTime)
		}
	}
	return outside
}

// TestTrackerStoreRestart runs writers against a real store through a
// split and a merge, takes committed cuts from a real reader, and restarts
// the store: the tracker resumes with the same watermarks, not older ones,
// without a Flush (only what Local and CommittedAt persisted). With marks
// written every call, and with marks never written but first ones.
func TestTrackerStoreRestart(t *testing.T) {
	for _, iv := range []time.Duration{-1, time.Hour} {
		t.Run(fmt.Sprint("markflush=", iv), func(t *testing.T) { testTrackerStoreRestart(t, iv) })
	}
}

func testTrackerStoreRestart(t *testing.T, markFlush time.Duration) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	opts := Options{IdleTimeout: 10 * time.Second, Now: clock.Now, MarkFlushInterval: markFlush}
	s, st := openStore(t, dir)
	tr, err := NewTracker(st, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	writers := map[string]string{"video/papa": "papa", "video/kilo": "kilo", "video/echo": "echo"}
	ids := []string{"video/echo", "video/kilo", "video/papa"}
	base := int64(1_700_000_000_000_000_000)
	step := func(i int) {
		for j, w := range ids {
			if _, _, err := ingest(ctx, st, tr, w, writers[w], base+int64(i*100+j*7)); err != nil {
				t.Fatal(err)
			}
		}
		clock.Add(100 * time.Millisecond)
	}
	reader, err := st.NewReader(st.HeadCut(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var committed []localstream.StreamCut
	commit := func(n int) Watermark {
		for range n {
			if _, err := reader.TryNext(); err != nil {
				t.Fatalf("reader: %v", err)
			}
		}
		cut := reader.Cut()
		committed = append(committed, cut)
		w, err := tr.CommittedAt(cut)
		if err != nil {
			t.Fatalf("CommittedAt(%s): %v", cut, err)
		}
		if le, err := st.Topology().LessEq(w.Cut, cut); err != nil || !le {
			t.Fatalf("committed watermark %s passes the committed cut %s", w, cut)
		}
		return w
	}
	for i := range 10 {
		step(i)
	}
	w1 := commit(12)
	if w1.IsZero() {
		t.Fatal("no committed watermark after 12 events")
	}
	topo := st.Topology()
	open := topo.Open()
	if _, err := st.Split(open[0].ID, 2); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 20; i++ {
		step(i)
	}
	w2 := commit(15)
	open = st.Topology().Open()
	if _, err := st.Merge(open[0].ID, open[1].ID); err != nil {
		t.Fatal(err)
	}
	for i := 20; i < 30; i++ {
		step(i)
	}
	w3 := commit(30)
	for _, w := range []Watermark{w2, w3} {
		if w.LowerNs < w1.LowerNs {
			t.Fatalf("committed watermark went back: %s after %s", w, w1)
		}
	}
	local, err := tr.Local()
	if err != nil {
		t.Fatal(err)
	}
	if local.LowerNs != base+29*100 {
		t.Fatalf("local lower %d, want %d (slowest writer's last time)", local.LowerNs, base+29*100)
	}
	if n := checkAgainstRecords(t, st, w3, "committed"); n == 0 {
		t.Fatal("no event outside the committed watermark's cut: the check proved nothing")
	}
	checkAgainstRecords(t, st, local, "local")
	// Notes after the last publication are not flushed: lost with the restart.
	step(30)
	stats := tr.Stats()
	if stats.Notes != 31*3 || stats.CommittedEmitted < 3 || stats.ActiveWriters != 3 {
		t.Fatalf("stats %+v", stats)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, st = openStore(t, dir)
	defer s.Close()
	metas, err := s.ScanMeta("wm/video/")
	if err != nil || len(metas) != 3 {
		t.Fatalf("persisted marks: %d keys, %v", len(metas), err)
	}
	tr, err = NewTracker(st, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	local2, err := tr.Local()
	if err != nil {
		t.Fatal(err)
	}
	if !local2.Equal(local) {
		t.Fatalf("after restart local watermark %s, want %s", local2, local)
	}
	w4, err := tr.CommittedAt(committed[len(committed)-1])
	if err != nil {
		t.Fatal(err)
	}
	if !w4.Equal(w3) {
		t.Fatalf("after restart committed watermark %s, want %s", w4, w3)
	}
	if !tr.Late("video/papa", local.LowerNs-1) {
		t.Fatal("an event before the published watermark is not late after restart")
	}
	if tr.Late("video/echo", local.LowerNs) {
		t.Fatal("an event at the published watermark (and at its writer's noted time) is late")
	}
	// Writers continue; watermarks advance from where they were.
	for i := 31; i < 40; i++ {
		step(i)
	}
	local3, err := tr.Local()
	if err != nil {
		t.Fatal(err)
	}
	if local3.LowerNs <= local.LowerNs {
		t.Fatalf("local watermark did not advance after restart: %s", local3)
	}
	if le, err := st.Topology().LessEq(local.Cut, local3.Cut); err != nil || !le {
		t.Fatalf("local cut went back: %s after %s", local3.Cut, local.Cut)
	}
	w5, err := tr.CommittedAt(st.TailCut())
	if err != nil {
		t.Fatal(err)
	}
	if w5.LowerNs <= w3.LowerNs {
		t.Fatalf("committed watermark did not advance: %s", w5)
	}
	checkAgainstRecords(t, st, w5, "committed")
}

// TestTrackerCorruptRecord: a persisted mark that cannot be decoded stops
// NewTracker (starting without it could publish an older watermark).
func TestTrackerCorruptRecord(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	if err := s.PutMeta("wm/video/video/papa", []byte("W\x01garbage")); err != nil {
		t.Fatal(err)
	}
	_, err := NewTracker(st, s, Options{})
	if !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("NewTracker with a corrupt mark: %v, want ErrCorruptRecord", err)
	}
}

// failingMeta wraps a real store and fails PutMeta while fail is set.
type failingMeta struct {
	*localstream.Store
	mu   sync.Mutex
	fail bool
	hits int
}

var errInjected = errors.New("injected meta write failure")

func (f *failingMeta) PutMeta(key string, val []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		f.hits++
		return errInjected
	}
	return f.Store.PutMeta(key, val)
}

// TestTrackerPersistFailure: a failed write is returned and counted, and
// the marks are written by the next call once the store works again.
func TestTrackerPersistFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, st := openStore(t, dir)
	meta := &failingMeta{Store: s}
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	tr, err := NewTracker(st, meta, Options{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, _, err := ingest(ctx, st, tr, "w", "papa", int64(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	meta.mu.Lock()
	meta.fail = true
	meta.mu.Unlock()
	if _, _, err := ingest(ctx, st, tr, "w", "papa", 200); err != nil {
		t.Fatal(err)
	}
	w, err := tr.Local()
	if !errors.Is(err, errInjected) || w.LowerNs != 200 {
		t.Fatalf("Local with failing meta: %s, %v", w, err)
	}
	if meta.hits == 0 || tr.Stats().PersistErrors == 0 {
		t.Fatalf("the fault did not happen: hits=%d stats=%+v", meta.hits, tr.Stats())
	}
	meta.mu.Lock()
	meta.fail = false
	meta.mu.Unlock()
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, st = openStore(t, dir)
	defer s.Close()
	tr, err = NewTracker(st, s, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if w2, err := tr.Local(); err != nil || !w2.Equal(w) {
		t.Fatalf("after restart %s (%v), want %s", w2, err, w)
	}
}

// TestTrackerConcurrent: writers on their own goroutines, readers of both
// watermarks on others (run with -race).
func TestTrackerConcurrent(t *testing.T) {
	ctx := context.Background()
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	// Times from 1970 with the real clock: no clock bounds.
	tr, err := NewTracker(st, s, Options{MaxClockSkew: -1, MaxClockBehind: -1})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if _, _, err := ingest(ctx, st, tr, fmt.Sprintf("w%d", w), fmt.Sprintf("k%d", w), int64(1000+i*10)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var rg sync.WaitGroup
	rg.Add(1)
	go func() {
		defer rg.Done()
		var last Watermark
		for {
			select {
			case <-stop:
				return
			default:
			}
			w, err := tr.CommittedAt(st.TailCut())
			if err != nil {
				t.Error(err)
				return
			}
			if w.LowerNs < last.LowerNs {
				t.Errorf("committed went back: %s after %s", w, last)
			}
			last = w
			if _, err := tr.Local(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	rg.Wait()
	w, err := tr.CommittedAt(st.TailCut())
	if err != nil || w.LowerNs != 1000+49*10 {
		t.Fatalf("final committed watermark %s (%v), want lower %d", w, err, 1000+49*10)
	}
	if !strings.HasPrefix(w.Cut.Stream, "video") {
		t.Fatalf("cut of stream %q", w.Cut.Stream)
	}
}
