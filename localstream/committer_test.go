package localstream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// holdOne makes the committer expect n appends, then queues one append
// that the group commit holds open (the window is an hour): it returns the
// append's result channel once the committer has taken it and shows it
// held. The n appends are queued while a control request holds the
// committer, so that they make one batch however slow the machine (an
// expectation of n), and are acknowledged before the held one starts.
func holdOne(t *testing.T, s *Store, st *Stream, n int) <-chan error {
	t.Helper()
	ctx := context.Background()
	release, blocked := make(chan struct{}), make(chan struct{})
	ctrl := make(chan error, 1)
	go func() { ctrl <- s.control(ctx, func() error { close(blocked); <-release; return nil }) }()
	<-blocked
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		err := st.AppendAsync(ctx, Event{RoutingKey: "burst", Writer: "w", EventTime: int64(i)}, func(_ Position, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-ctrl; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	commits := s.Stats().Commits
	res := make(chan error, 1)
	err := st.AppendAsync(ctx, Event{RoutingKey: "lone", Writer: "w", EventTime: int64(n)}, func(_ Position, err error) { res <- err })
	if err != nil {
		t.Fatal(err)
	}
	for len(res) == 0 && s.Stats().QueueLen > 0 {
		time.Sleep(time.Millisecond) // queued, not taken yet
	}
	// Taken by the committer: with an hour's window and n appends
	// expected, it is held, not committed.
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("append not held: returned %v", err)
	default:
	}
	if c := s.Stats().Commits; c != commits {
		t.Fatalf("held append committed: %d commits, want %d", c, commits)
	}
	return res
}

// TestGroupCommitCloseWritesHeldBatch: Close while a batch is held open
// writes and acknowledges it at once (not at the end of the window), and
// it is durable.
func TestGroupCommitCloseWritesHeldBatch(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{GroupCommitWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	st := mustStream(t, s, "t", 1)
	res := holdOne(t, s, st, 100)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the group commit window")
	}
	if err := <-res; err != nil {
		t.Fatalf("held append: %v", err)
	}
	s2 := openStore(t, dir, Options{})
	st2, err := s2.Stream("t")
	if err != nil {
		t.Fatal(err)
	}
	if recs := readAll(t, st2); len(recs) != 101 || recs[100].RoutingKey != "lone" {
		t.Fatalf("after reopen: %d events, want 101 ending with the held one", len(recs))
	}
}

// TestGroupCommitControlEndsHold: a scale requested while a batch is held
// open writes the batch and runs at once.
func TestGroupCommitControlEndsHold(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{GroupCommitWindow: time.Hour})
	st := mustStream(t, s, "t", 1)
	res := holdOne(t, s, st, 100)
	done := make(chan error, 1)
	go func() { _, err := st.Split(st.Topology().Open()[0].ID, 2); done <- err }()
	for _, c := range []<-chan error{res, done} {
		select {
		case err := <-c:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a scale waited for the group commit window")
		}
	}
	if n := len(readAll(t, st)); n != 101 {
		t.Fatalf("%d events, want 101", n)
	}
}

// TestGroupCommitLoneWriterNotHeld: one writer waiting for each ack is
// never held, whatever the window: one commit per append.
func TestGroupCommitLoneWriterNotHeld(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{GroupCommitWindow: time.Hour})
	st := mustStream(t, s, "t", 1)
	commits := s.Stats().Commits
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := st.Append(ctx, Event{RoutingKey: "lone", Writer: "w", EventTime: int64(i)})
		cancel()
		if err != nil {
			t.Fatalf("append %d: %v (held?)", i, err)
		}
	}
	if c := s.Stats().Commits - commits; c != 20 {
		t.Fatalf("%d commits for 20 sequential appends, want 20", c)
	}
}

// TestGroupCommitGroupsWriters: writers that each wait for their ack are
// grouped into commits of several events, and every append lands in
// order.
func TestGroupCommitGroupsWriters(t *testing.T) {
	const writers, each = 16, 50
	s := openStore(t, t.TempDir(), Options{GroupCommitWindow: 50 * time.Millisecond})
	st := mustStream(t, s, "t", 2)
	commits := s.Stats().Commits
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := Event{RoutingKey: fmt.Sprintf("d%d", w), Writer: "w", EventTime: int64(i)}
				if _, err := st.Append(context.Background(), ev); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	c := s.Stats().Commits - commits
	t.Logf("%d appends from %d writers in %d commits", writers*each, writers, c)
	if c > writers*each/4 {
		t.Fatalf("%d commits for %d appends from %d writers: not grouped", c, writers*each, writers)
	}
	next := map[string]int64{}
	for _, r := range readAll(t, st) {
		if r.EventTime != next[r.RoutingKey] {
			t.Fatalf("%s: event %d, want %d", r.RoutingKey, r.EventTime, next[r.RoutingKey])
		}
		next[r.RoutingKey]++
	}
	if len(next) != writers {
		t.Fatalf("%d keys, want %d", len(next), writers)
	}
}
