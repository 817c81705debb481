package localstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"golang.org/x/sys/unix"
)

const (
	bigDeleteDirEnv = "EDGE_LOCALSTREAM_BIGDELETE_DIR"
	// bigDeleteModeEnv is "truncate" or "shed": how the child deletes.
	bigDeleteModeEnv = "EDGE_LOCALSTREAM_BIGDELETE_MODE"
)

// bigDeleteBatches is how many record batches the deletion deletes: with
// a 1 MiB memtable, their tombstones fill three memtables and more.
const bigDeleteBatches = 50000

// bigDeleteKeep is how many events are appended after the deletion's cut.
const bigDeleteKeep = 10

// bigDeleteChild is the child process (role "bigdelete") of TestBigDeletionOnFullTmpfs:
// a store with a 1 MiB memtable on the tmpfs at $EDGE_LOCALSTREAM_BIGDELETE_DIR
// appends bigDeleteBatches events one commit each (a record batch each) and
// flushes them to tables, marks them replicated, appends bigDeleteKeep more,
// then leaves the tmpfs with just the free blocks the deletion allocated
// ahead of it before this commit (its whole current and next memtable
// logs), the rest held by a filler, and truncates (or sheds) the stream
// before the kept events. It prints "T <error>" and "LEFT <n> <first seq>"
// (the events still stored, gap markers aside) and waits to be killed.
func bigDeleteChild() int {
	dir := os.Getenv(bigDeleteDirEnv)
	fail := func(err error) {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	s, err := Open(filepath.Join(dir, "store"), Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MemTableSize: 1 << 20, MinFreeBytes: -1, GroupCommitWindow: -1})
	if err != nil {
		fail(err)
	}
	st, err := s.CreateStream("big", StreamConfig{})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	appendSeq := func(seq uint64) {
		if _, err := st.Append(ctx, Event{RoutingKey: "k", Writer: "w", Payload: binary.BigEndian.AppendUint64(nil, seq)}); err != nil {
			fail(err)
		}
	}
	for seq := range uint64(bigDeleteBatches) {
		appendSeq(seq) // one at a time: one record batch each
	}
	if err := s.flushMemtable(); err != nil {
		fail(err)
	}
	cut := st.TailCut()
	if err := st.SetCommittedCut("centre", cut); err != nil {
		fail(err)
	}
	for i := range uint64(bigDeleteKeep) {
		appendSeq(bigDeleteBatches + i) // (and the committer follows Badger to its new log)
	}
	// What the committer allocated ahead is all this store has; the
	// deletion may take the rest of its current and next logs, and no
	// more: the tmpfs is full around them.
	w := s.wal
	left := (w.size - w.touched(w.fid)) + (w.size - w.touched(w.fid+1))
	hold := filepath.Join(dir, "hold")
	fd, err := os.OpenFile(hold, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	if err := unix.Fallocate(int(fd.Fd()), 0, 0, left); err != nil {
		fail(fmt.Errorf("holding %d bytes: %w", left, err))
	}
	fd.Close()
	f := &filler{dir: dir}
	f.take(4 << 20)
	if err := os.Remove(hold); err != nil {
		fail(err)
	}
	fmt.Println("FREE", f.free(), "for", left, "bytes of logs; memtable log", w.fid)
	if os.Getenv(bigDeleteModeEnv) == "shed" {
		_, err = st.Shed(ctx, cut, "test")
	} else {
		err = st.Truncate(cut)
	}
	fmt.Println("T", err)
	recs, rerr := st.ReadAll()
	if rerr != nil {
		fail(rerr)
	}
	recs = slices.DeleteFunc(recs, func(r Record) bool { return r.Flags&FlagGap != 0 })
	first := uint64(0)
	if len(recs) > 0 {
		first = binary.BigEndian.Uint64(recs[0].Payload)
	}
	fmt.Println("LEFT", len(recs), first)
	fmt.Println("FILLERS", strings.Join(f.files, " "))
	select {} // until killed
}

// TestBigDeletionOnFullTmpfs: a retention deletion (or a shed) of a long
// backlog writes more tombstones than a whole memtable holds. Badger
// rotates the memtable on the way and creates the next memtable's log
// itself, in the middle of the deletion's write; on a tmpfs held full by
// another process that log has no blocks, Badger gets ENOSPC creating it,
// is left without a memtable and dies of an assertion on the next write —
// after the deletion had the blocks it asked for (the rest of its current
// log and its next one). The store must survive it: the deletion goes in
// pieces, each within a quarter of a memtable with its blocks allocated
// first, oldest first; a piece without blocks stops the deletion
// (ErrDiskFull) with the stream consistent — what is left a contiguous
// run up to the tail — and so does a SIGKILL after it; the next
// truncation finishes the deletion, and for a shed the next Open does,
// with its gap marker.
func TestBigDeletionOnFullTmpfs(t *testing.T) {
	for round := range testkit.Rounds(1) {
		for _, mode := range []string{"truncate", "shed"} {
			t.Run(fmt.Sprintf("%s/r%d", mode, round), func(t *testing.T) { bigDeletion(t, mode) })
		}
	}
}

func bigDeletion(t *testing.T, mode string) {
	dir := filepath.Join(t.TempDir(), "fs")
	testkit.MountTmpfs(t, dir, 64<<20)
	cmd := testkit.ChildCommand("bigdelete", bigDeleteDirEnv+"="+dir, bigDeleteModeEnv+"="+mode)
	stderr := &testkit.SyncBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var truncErr string
	left, first := -1, uint64(0)
	timeout := time.After(10 * time.Minute)
	for left < 0 {
		select {
		case line, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				t.Fatalf("the child died (%v) before the deletion was over; stderr:\n%s", err, tail(stderr.String(), 3000))
			}
			t.Logf("child: %s", line)
			switch {
			case strings.HasPrefix(line, "ERR"):
				t.Fatalf("child: %s\n%s", line, tail(stderr.String(), 3000))
			case strings.HasPrefix(line, "T "):
				truncErr = strings.TrimPrefix(line, "T ")
			case strings.HasPrefix(line, "LEFT "):
				f := strings.Fields(line)
				left, _ = strconv.Atoi(f[1])
				first, _ = strconv.ParseUint(f[2], 10, 64)
			}
		case <-timeout:
			cmd.Process.Kill()
			t.Fatalf("the child did not finish its deletion in 10 minutes; stderr:\n%s", tail(stderr.String(), 3000))
		}
	}
	// A crash now: the deletion's pieces that went through stay, its
	// head did not move.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); !testkit.KilledBySIGKILL(cmd) {
		t.Fatalf("the child ended with %v, not SIGKILL", err)
	}
	total := bigDeleteBatches + bigDeleteKeep
	switch {
	case truncErr == "<nil>":
		if left != bigDeleteKeep || first != bigDeleteBatches {
			t.Fatalf("the deletion went through and left %d events from %d, want %d from %d", left, first, bigDeleteKeep, bigDeleteBatches)
		}
	case strings.Contains(truncErr, ErrDiskFull.Error()):
		// What is left runs up to the tail (checked below, after the
		// reopen): the oldest went first.
		if left <= bigDeleteKeep || left > total || int(first)+left != total {
			t.Fatalf("the refused deletion left %d events from %d of %d", left, first, total)
		}
		t.Logf("the deletion was refused part way: %d of %d events deleted, %d left", total-left, bigDeleteBatches, left)
	default:
		t.Fatalf("the deletion on the full tmpfs: %s, want nil or ErrDiskFull", truncErr)
	}
	// The space comes back; the store reopens with what the deletion left,
	// and the next truncation finishes it.
	fills, _ := filepath.Glob(filepath.Join(dir, "fill*"))
	for _, f := range fills {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(filepath.Join(dir, "store"), Options{MemTableSize: 1 << 20, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stream("big")
	if err != nil {
		t.Fatal(err)
	}
	// check: the events other than gap markers are n from seq from, in
	// order; it returns the gap markers.
	check := func(what string, n int, from uint64) (gaps []Gap) {
		t.Helper()
		recs := readAll(t, st)
		i := 0
		for _, rec := range recs {
			if rec.Flags&FlagGap != 0 {
				var g Gap
				if err := json.Unmarshal(rec.Payload, &g); err != nil {
					t.Fatal(err)
				}
				gaps = append(gaps, g)
				continue
			}
			if seq := binary.BigEndian.Uint64(rec.Payload); seq != from+uint64(i) {
				t.Fatalf("%s: event %d is %d, want %d (a hole)", what, i, seq, from+uint64(i))
			}
			i++
		}
		if i != n {
			t.Fatalf("%s: %d events, want %d", what, i, n)
		}
		return gaps
	}
	if mode == "shed" {
		// Open finished the shed (its record said not yet deleted) and
		// appended its marker.
		gaps := check("reopened after the kill (Open finishes the shed)", bigDeleteKeep, bigDeleteBatches)
		if len(gaps) != 1 || gaps[0].Events != bigDeleteBatches {
			t.Fatalf("gap markers after the shed: %+v, want one of %d events", gaps, bigDeleteBatches)
		}
		return
	}
	check("reopened after the kill", left, first)
	cuts, err := st.CommittedCuts()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Truncate(cuts["centre"]); err != nil {
		t.Fatalf("the deletion again, with the space back: %v", err)
	}
	check("after the deletion finished", bigDeleteKeep, bigDeleteBatches)
}
