package devices

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestCarriedMarkersSurviveRefusedShed: a shed whose range holds an
// unreplicated gap marker of an earlier shed is refused by a full tmpfs
// (ErrDiskFull: no blocks for its tombstones) after localstream recorded
// it. The recorded shed is finished later, by FinishSheds (the next
// check) or by the next Open, and deletes the old marker then: its copy
// must be appended all the same, once, or that loss goes unreported; and
// a second shed refused over the same range does not copy it twice.
func TestCarriedMarkersSurviveRefusedShed(t *testing.T) {
	for _, finish := range []string{"check", "reopen"} {
		t.Run(finish, func(t *testing.T) { refusedShed(t, finish) })
	}
}

func refusedShed(t *testing.T, finish string) {
	fsDir := filepath.Join(t.TempDir(), "fs")
	testkit.MountTmpfs(t, fsDir, 256<<20)
	small := &smallFS{Dir: fsDir, Size: 256 << 20, Real: true}
	dir := filepath.Join(fsDir, "store")
	// A 16 MiB memtable: a quarter of it (a piece of a deletion) holds
	// more than walAhead (1 MiB) of tombstones of the keys below, so the
	// first piece needs blocks the full tmpfs does not have.
	opts := localstream.Options{MemTableSize: 16 << 20, MinFreeBytes: -1, GroupCommitWindow: -1, Logger: quietLogger()}
	s, err := localstream.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	name := "v" + strings.Repeat("x", 62) // long data keys: more tombstone bytes a key
	st, err := s.CreateStream(name, localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 4 {
		if _, err := st.Append(ctx, localstream.Event{RoutingKey: "d0", Writer: "w", Payload: fmt.Appendf(nil, "old-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Shed(ctx, st.TailCut(), "earlier"); err != nil {
		t.Fatal(err)
	}
	old := readAll(t, st)
	if len(old) != 1 || !old[0].Flags.Has(localstream.FlagGap) {
		t.Fatalf("after the first shed: %d records, want its gap marker alone", len(old))
	}
	marker := old[0]
	const events = 12000
	for i := range events { // one commit each: a data key each
		if _, err := st.Append(ctx, localstream.Event{RoutingKey: "d1", Writer: "w", Payload: fmt.Appendf(nil, "e-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	disk := &fakeDisk{free: 0, total: 1000}
	cfg := PressureConfig{RetainBelow: Threshold{Bytes: 500}, ShedBelow: Threshold{Bytes: 200}, ShedFraction: 1,
		Policy: []ShedRule{{Stream: name, AllowUnreplicated: true}}, DiskSpace: disk.space, Logger: quietLogger()}
	p, err := NewPressure(s, cfg)
	if err != nil {
		t.Fatal(err)
	}

	small.Fill(t, 0)
	_, err = p.Check(ctx)
	if !errors.Is(err, localstream.ErrDiskFull) {
		t.Fatalf("shed on a full tmpfs: %v, want ErrDiskFull", err)
	}
	if in, _ := st.Topology().Contains(st.HeadCut(), marker.Position); in {
		t.Fatalf("the refused shed moved the head past the old marker")
	}
	t.Logf("shed refused: %v", err)
	// Still full: the next check cannot finish the shed and sheds again
	// (refused again), over the same old marker, whose copy already waits.
	if _, err := p.Check(ctx); !errors.Is(err, localstream.ErrDiskFull) {
		t.Fatalf("second shed on a full tmpfs: %v, want ErrDiskFull", err)
	}
	if got := p.Stats().PendingMarkers; got != 1 {
		t.Fatalf("%d carried markers pending after two refused sheds, want 1", got)
	}
	small.Unfill(t)

	switch finish {
	case "check":
		disk.set(1000)
		if _, err := p.Check(ctx); err != nil {
			t.Fatal(err)
		}
	case "reopen":
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		closed = true
		if s, err = localstream.Open(dir, opts); err != nil {
			t.Fatal(err)
		}
		closed = false
		if st, err = s.Stream(name); err != nil {
			t.Fatal(err)
		}
		if p, err = NewPressure(s, cfg); err != nil {
			t.Fatal(err)
		}
		disk.set(1000)
		if _, err := p.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if in, _ := st.Topology().Contains(st.HeadCut(), marker.Position); !in {
		t.Fatalf("the refused shed was not finished: head %s", st.HeadCut())
	}
	copies, data := 0, 0
	for _, r := range readAll(t, st) {
		switch {
		case r.Flags.Has(localstream.FlagGap) && bytes.Equal(r.Payload, marker.Payload):
			copies++
		case !r.Flags.Has(localstream.FlagGap):
			data++
		}
	}
	if copies != 1 || data != 0 {
		t.Fatalf("old gap marker %s: %d copies left after its shed was finished (want 1); %d data events left (want 0)", marker.Position, copies, data)
	}
	if kept, _ := s.ScanMeta(markerPrefix); len(kept) != 0 {
		t.Fatalf("%d carried markers still recorded after their append", len(kept))
	}
}
