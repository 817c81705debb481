package localstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"golang.org/x/sys/unix"
)

const (
	tmpfsDirEnv = "EDGE_LOCALSTREAM_TMPFS_DIR"
	// tmpfsRoundEnv prefixes the child's keys: each round's writers are new.
	tmpfsRoundEnv = "EDGE_LOCALSTREAM_TMPFS_ROUND"
)

// tmpfsChild is the child process (role "tmpfs") of TestFullTmpfs: four writers
// append until SIGTERM, each retrying an append the store refused (as
// intake waits for space), printing each acknowledged append ("A key
// seq") and each refusal ("R key err"); at SIGTERM it closes the store
// and exits 0.
func tmpfsChild() int {
	dir := os.Getenv(tmpfsDirEnv)
	s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MinFreeBytes: 8 << 20})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	st, err := s.CreateStream("tmpfs", StreamConfig{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	appendUntilTerm(s, st, "tmpfs/", 2048, 20*time.Millisecond)
	return 0
}

// appendUntilTerm is a tmpfs child's work: four writers append size-byte
// events to st until SIGTERM, each retrying (after backoff) what the
// store refused, the acknowledged appends printed ("A key seq") and the
// refusals ("R key err"); at SIGTERM it closes the store ("C err" for a
// close without room to flush: the log is replayed at the next open) and
// returns, or exits 4 for any other close error.
func appendUntilTerm(s *Store, st *Stream, writer string, size int, backoff time.Duration) {
	out := make(chan string, 1024)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	for w := range 4 {
		key := fmt.Sprintf("%sw%d", os.Getenv(tmpfsRoundEnv), w)
		go func() {
			defer func() { done <- struct{}{} }()
			for seq := uint64(0); ctx.Err() == nil; {
				payload := binary.BigEndian.AppendUint64(make([]byte, 0, size), seq)
				payload = payload[:size]
				if _, err := st.Append(ctx, Event{RoutingKey: key, Writer: writer + key, Payload: payload}); err != nil {
					if ctx.Err() == nil {
						out <- fmt.Sprintf("R %s %v", key, strings.ReplaceAll(err.Error(), "\n", " "))
						time.Sleep(backoff) // the intake's wait before it tries again
					}
					continue
				}
				out <- fmt.Sprintf("A %s %d", key, seq)
				seq++
			}
		}()
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fmt.Println("READY")
	w := bufio.NewWriter(os.Stdout)
	for running := 4; running > 0; {
		select {
		case line := <-out:
			fmt.Fprintln(w, line)
			if len(out) == 0 {
				w.Flush()
			}
		case <-term:
			stop()
		case <-done:
			running--
		}
	}
	for len(out) > 0 {
		fmt.Fprintln(w, <-out)
	}
	w.Flush()
	if err := s.Close(); errors.Is(err, ErrDiskFull) {
		fmt.Println("C", err) // no room to flush: the log is replayed at the next open
	} else if err != nil {
		fmt.Println("ERR close", err)
		os.Exit(4)
	}
}

// TestFullTmpfs: another process fills the store's tmpfs to 0 bytes while
// appends go on. The store survives it as it survives a full ext4: no
// SIGBUS (Badger writes its memtable's log and tables through mmap, and a
// page of a tmpfs file that cannot be allocated is a SIGBUS, not an
// error), appends refused with a clear error while the disk is full, and
// once space is back appends resume and every acknowledged one is there,
// once.
//
// On main (fc99d4c) the child died of SIGBUS in Badger's memtable write
// (z.ZeroOut). The last round stops the child while the tmpfs is still
// full: Badger's close writes the memtable to a table through mmap, and
// the child died of "unexpected fault address" in that flush
// (table.CreateTable) until the store looked for room first
// (flushspace.go); now the close skips the flush, an Open while full is
// refused with ErrDiskFull, and the next Open with room replays the log.
func TestFullTmpfs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fs")
	testkit.MountTmpfs(t, dir, 96<<20)
	storeDir := filepath.Join(dir, "store")
	for round := range testkit.Rounds(3) + 1 {
		// The last round stops the child while the tmpfs is still full:
		// Badger flushes its memtable to a new table when it closes.
		acked, refused := fillTmpfsRound(t, dir, storeDir, fmt.Sprintf("r%d", round), round == testkit.Rounds(3))
		s, err := Open(storeDir, Options{MinFreeBytes: -1})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		st, err := s.Stream("tmpfs")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]map[uint64]int{}
		for _, rec := range readAll(t, st) {
			if seen[rec.RoutingKey] == nil {
				seen[rec.RoutingKey] = map[uint64]int{}
			}
			seen[rec.RoutingKey][binary.BigEndian.Uint64(rec.Payload)]++
		}
		for key, seqs := range acked {
			for seq := range seqs {
				if n := seen[key][seq]; n != 1 {
					t.Fatalf("round %d: acknowledged %s/%d stored %d times", round, key, seq, n)
				}
			}
		}
		n := 0
		for _, seqs := range acked {
			n += len(seqs)
		}
		t.Logf("round %d: %d acknowledged appends all stored once; %d refusals while full (%s)", round, n, refused.n, refused.first)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

type refusals struct {
	n     int
	first string
}

// fillTmpfsRound runs the child on storeDir, fills the tmpfs at dir to 0
// bytes from another process while it appends, gives the space back,
// stops the child and returns what it acknowledged and refused.
func fillTmpfsRound(t *testing.T, dir, storeDir, round string, stopWhileFull bool) (acked map[string]map[uint64]bool, refused refusals) {
	t.Helper()
	cmd := testkit.ChildCommand("tmpfs", tmpfsDirEnv+"="+storeDir, tmpfsRoundEnv+"="+round)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked = map[string]map[uint64]bool{}
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	count := 0
	closedFull := "" // the child's close without a flush
	read := func(until time.Time, want func() bool) {
		for time.Now().Before(until) && !want() {
			select {
			case line, ok := <-lines:
				if !ok {
					return
				}
				var key string
				var seq uint64
				switch {
				case strings.HasPrefix(line, "A "):
					fmt.Sscanf(line, "A %s %d", &key, &seq)
					if acked[key] == nil {
						acked[key] = map[uint64]bool{}
					}
					acked[key][seq] = true
					count++
				case strings.HasPrefix(line, "R "):
					if refused.n++; refused.first == "" {
						refused.first = line
					}
				case strings.HasPrefix(line, "ERR"):
					t.Errorf("child: %s", line)
				case strings.HasPrefix(line, "C "):
					closedFull = line
				}
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	read(time.Now().Add(30*time.Second), func() bool { return count >= 2000 })
	if count < 2000 {
		cmd.Process.Kill()
		t.Fatalf("the child acknowledged %d appends in 30 s", count)
	}
	// Another process takes every free byte, as fast as it can: first a
	// fallocate of what is free, then dd for what remains.
	filler := filepath.Join(dir, "filler")
	var fs unix.Statfs_t
	unix.Statfs(dir, &fs)
	if out, err := exec.Command("fallocate", "-l", strconv.FormatInt(int64(fs.Bavail)*fs.Bsize, 10), filler).CombinedOutput(); err != nil {
		t.Logf("fallocate: %v %s", err, out)
	}
	exec.Command("dd", "if=/dev/zero", "of="+filler+"2", "bs=4k").Run() // ends with ENOSPC
	unix.Statfs(dir, &fs)
	t.Logf("tmpfs filled from outside: %d bytes free; appends acknowledged so far %d", int64(fs.Bavail)*fs.Bsize, count)
	before := count
	read(time.Now().Add(2*time.Second), func() bool { return false })
	t.Logf("while full: %d more acknowledged, %d refused", count-before, refused.n)
	release := func() {
		os.Remove(filler)
		os.Remove(filler + "2")
	}
	atRelease := count
	if stopWhileFull {
		cmd.Process.Signal(syscall.SIGTERM)
		read(time.Now().Add(30*time.Second), func() bool { return false })
		atRelease = -500
		defer func() {
			if closedFull == "" {
				t.Fatal("stopped while the tmpfs was full: the close did not say it skipped the memtable's flush")
			}
			t.Logf("stopped while full: %s", closedFull)
		}()
		// Badger would flush the log to a table as it opens: refused
		// until there is room.
		if _, err := Open(storeDir, Options{MinFreeBytes: -1}); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("open while the tmpfs is full: %v, want ErrDiskFull", err)
		} else {
			t.Logf("open while full: %v", err)
		}
	} else {
		release()
		read(time.Now().Add(30*time.Second), func() bool { return count >= atRelease+500 })
		cmd.Process.Signal(syscall.SIGTERM)
		read(time.Now().Add(30*time.Second), func() bool { return false })
	}
	err = cmd.Wait()
	release()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("the child died of %v while the tmpfs was full:\n%s", ws.Signal(), tail(stderr.String(), 3000))
		}
	}
	if err != nil {
		t.Fatalf("child: %v:\n%s", err, tail(stderr.String(), 3000))
	}
	if refused.n == 0 {
		t.Fatalf("the tmpfs was full and no append was refused")
	}
	if count < atRelease+500 {
		t.Fatalf("appends did not resume after the space came back: %d acknowledged after it", count-atRelease)
	}
	return acked, refused
}

// tail is the crash's first lines when s holds one (the fault, the
// faulting goroutine), else the last n bytes of s.
func tail(s string, n int) string {
	if i := strings.Index(s, "unexpected fault address"); i >= 0 {
		return s[i:min(len(s), i+n)]
	}
	if i := strings.Index(s, "fatal error"); i >= 0 {
		return s[i:min(len(s), i+n)]
	}
	return s[max(0, len(s)-n):]
}
