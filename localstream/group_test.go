package localstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestAppendGroupOneCommit: a group is one commit, its callback comes
// once with every event's position, in order, and the events are stored
// as they were when the call returned (their memory reused at once).
func TestAppendGroupOneCommit(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	st := mustStream(t, s, "telemetry", 3)
	ctx := context.Background()
	// Two groups and, between them, a lone append.
	var want []Event
	var got []Position
	var calls int
	done := make(chan error, 3)
	group := func(n, first int) {
		evs := make([]Event, n)
		for i := range evs {
			p := []byte(fmt.Sprint("frame ", first+i))
			if i == 7 {
				p = bytes.Repeat([]byte{byte(i)}, 5000) // a payload file's
			}
			evs[i] = Event{RoutingKey: fmt.Sprint("drone-", i%4), Writer: "mavlink/x", EventTime: int64(first + i),
				ContentType: "application/x-mavlink", Headers: []Header{{"mavlink-msgid", fmt.Sprint(i)}}, Payload: p}
			want = append(want, evs[i])
			want[len(want)-1].Payload, want[len(want)-1].Headers = bytes.Clone(p), slices.Clone(evs[i].Headers)
		}
		commits := s.Stats().Commits
		err := st.AppendGroupAsync(ctx, evs, func(pos []Position, err error) {
			calls++
			if len(pos) != n {
				t.Errorf("callback with %d positions, want %d", len(pos), n)
			}
			got = append(got, pos...)
			done <- err
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs { // the caller's memory, reused
			clear(evs[i].Payload)
			evs[i].Headers[0].Value = "reused"
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if c := s.Stats().Commits - commits; c != 1 {
			t.Errorf("a group of %d made %d commits, want 1", n, c)
		}
	}
	group(300, 0)
	pos, err := st.Append(ctx, Event{RoutingKey: "drone-1", Writer: "w", EventTime: 300, Payload: []byte("lone")})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, Event{RoutingKey: "drone-1", Writer: "w", EventTime: 300, Payload: []byte("lone")})
	got = append(got, pos)
	group(50, 301)
	if calls != 2 {
		t.Fatalf("%d group callbacks, want 2", calls)
	}
	byPos := map[Position]Record{}
	for _, r := range readAll(t, st) {
		byPos[r.Position] = r
	}
	if len(byPos) != len(want) {
		t.Fatalf("%d records stored, want %d", len(byPos), len(want))
	}
	last := map[SegmentID]uint64{}
	for i, p := range got {
		r, ok := byPos[p]
		if !ok {
			t.Fatalf("event %d: no record at %v", i, p)
		}
		w := want[i]
		if r.EventTime != w.EventTime || !bytes.Equal(r.Payload, w.Payload) || r.RoutingKey != w.RoutingKey ||
			len(r.Headers) != len(w.Headers) || (len(w.Headers) > 0 && r.Headers[0] != w.Headers[0]) {
			t.Fatalf("event %d at %v: stored %+v, want %+v", i, p, r.Event, w)
		}
		if o, seen := last[p.Segment]; seen && p.Offset <= o {
			t.Fatalf("event %d at %v: not after offset %d of its segment", i, p, o)
		}
		last[p.Segment] = p.Offset
	}
}

// TestAppendGroupRefusedWhole: an invalid event, a group over the bounds
// or one below the free-space floor is refused before anything of it is
// written.
func TestAppendGroupRefusedWhole(t *testing.T) {
	var free int64 = 1 << 40
	s := openStore(t, t.TempDir(), Options{MaxBatchEvents: 100, MinFreeBytes: 1 << 20,
		FreeSpace: func(string) (int64, error) { return free, nil }})
	st := mustStream(t, s, "telemetry", 1)
	ctx := context.Background()
	evs := func(n int) []Event {
		out := make([]Event, n)
		for i := range out {
			out[i] = Event{RoutingKey: "d", Writer: "w", Payload: []byte("x")}
		}
		return out
	}
	never := func([]Position, error) { t.Error("callback of a refused group") }
	bad := evs(10)
	bad[6].Writer = ""
	if err := st.AppendGroupAsync(ctx, bad, never); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("an invalid event in the group: %v, want ErrInvalidEvent", err)
	}
	if err := st.AppendGroupAsync(ctx, evs(101), never); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("101 events over MaxBatchEvents 100: %v, want ErrInvalidEvent", err)
	}
	free = 1 << 10
	if err := s.refreshFree(); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendGroupAsync(ctx, evs(10), never); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("below the floor: %v, want ErrDiskFull", err)
	}
	if n := len(readAll(t, st)); n != 0 {
		t.Fatalf("%d records written by refused groups", n)
	}
}

// TestAppendGroupWithMeta: a group's WithMeta keys are durable with it
// (read back after a reopen), and a refused group writes none.
func TestAppendGroupWithMeta(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	st := mustStream(t, s, "telemetry", 1)
	ev := Event{RoutingKey: "d", Writer: "mavlink/d", Payload: []byte("frame")}
	done := make(chan error, 1)
	if err := st.AppendGroupAsync(context.Background(), []Event{ev, ev}, func(_ []Position, err error) { done <- err },
		WithMeta("group/k", []byte("v1"))); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	bad := ev
	bad.RoutingKey = ""
	if err := st.AppendGroupAsync(context.Background(), []Event{ev, bad}, func([]Position, error) {},
		WithMeta("group/k", []byte("v2"))); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("a group with a bad event: %v", err)
	}
	s.Close()
	s = openStore(t, dir, Options{})
	if v, ok, err := s.GetMeta("group/k"); err != nil || !ok || string(v) != "v1" {
		t.Fatalf("after a reopen: %q %v %v, want v1", v, ok, err)
	}
}
