package localstream

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRemovedDirFailsTheStore: the store's directory removed under it is
// a failure within a second or so — Failed is closed, appends are
// refused with ErrDirGone, Stats says why — instead of acknowledging
// appends into files that no longer have a name; Close returns.
func TestRemovedDirFailsTheStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir, Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.CreateStream("telemetry", StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the store did not fail within 10 s of its directory's removal")
	}
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"}); !errors.Is(err, ErrDirGone) {
		t.Fatalf("append after the removal: %v, want ErrDirGone", err)
	}
	if f := s.Stats().Failed; f == "" {
		t.Fatal("Stats().Failed empty")
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		t.Logf("close: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestOpenLeavesALiveStoresNextLog: a second Open of a store that is open
// (refused by Badger's lock) does not remove the open store's next
// memtable log, allocated ahead for a full filesystem (walspace.go).
func TestOpenLeavesALiveStoresNextLog(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next := s.wal.path(s.wal.fid + 1)
	if _, err := os.Stat(next); err != nil {
		t.Fatalf("the next memtable log is not there after Open: %v", err)
	}
	if _, err := Open(dir, Options{MinFreeBytes: -1}); err == nil {
		t.Fatal("a second Open of an open store succeeded")
	}
	if _, err := os.Stat(next); err != nil {
		t.Fatalf("a refused second Open removed the open store's next log: %v", err)
	}
}

// TestRemovedDuringCommitNotAcknowledged: a directory removed after the
// committer's check but before the batch is durable (the race the check
// alone leaves) fails the batch: not acknowledged (the sender keeps the
// event) and not shown to readers (it never reaches the centre from this
// store), since a restart can no longer find it — nor its dedup record.
//
// Failed before the completer checked the directory: "append acknowledged
// at telemetry#0@1 into a removed directory".
func TestRemovedDuringCommitNotAcknowledged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir, Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.CreateStream("telemetry", StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"}); err != nil {
		t.Fatal(err)
	}
	removed := false
	testHookCommitted = func() {
		testHookCommitted = nil // once; the completer is the only caller
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
		removed = true
	}
	defer func() { testHookCommitted = nil }()
	pos, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"})
	if !removed {
		t.Fatal("the directory was not removed between the commit and its acknowledgement")
	}
	if err == nil {
		t.Fatalf("append acknowledged at %v into a removed directory", pos)
	}
	if !errors.Is(err, ErrDirGone) {
		t.Fatalf("append: %v, want ErrDirGone", err)
	}
	if n := st.Stats().Appended; n != 1 {
		t.Fatalf("readers see %d events, want the 1 acknowledged before the removal", n)
	}
}
