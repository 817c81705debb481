package localstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"golang.org/x/sys/unix"
)

const churnDirEnv = "EDGE_LOCALSTREAM_CHURN_DIR"

// churnChild is the child process (role "churn") of TestTmpfsChurn: a store
// with a small memtable (a flush every ~1 MiB of writes, a compaction every
// few flushes), four writers appending until SIGTERM and retrying what the
// store refuses, printing each acknowledged append ("A key seq"); at
// SIGTERM it closes the store, prints how many of Badger's files could not
// have their blocks ("F n") and exits 0.
func churnChild() int {
	dir := os.Getenv(churnDirEnv)
	s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MemTableSize: 1 << 20, MinFreeBytes: -1, CloseTimeout: 20 * time.Second})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	st, err := s.Stream("churn")
	if err != nil {
		st, err = s.CreateStream("churn", StreamConfig{})
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	appendUntilTerm(s, st, "churn/", 1024, 5*time.Millisecond)
	fmt.Println("F", allocRefused.Load(), "of Badger's files had no blocks")
	return 0
}

// TestTmpfsChurn: another process holds the store's tmpfs at 0 bytes free
// and gives a little back now and then, for a moment, so that the store's
// checks for room pass and Badger's next write of a table (a memtable's
// flush, or a compaction: tables written from tables, which no check
// covers) finds no block. The store must survive it as it survives a full
// ext4: no SIGBUS (a page of a tmpfs file that cannot be allocated is a
// SIGBUS, a crash, not an error), and once the space is back appends go
// on and every acknowledged one is there, once.
func TestTmpfsChurn(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	dir := filepath.Join(t.TempDir(), "fs")
	testkit.MountTmpfs(t, dir, 64<<20)
	storeDir := filepath.Join(dir, "store")
	acked := map[string]map[uint64]bool{}
	refusedFiles := 0
	for round := range testkit.Rounds(3) {
		refusedFiles += churnRound(t, rng, dir, storeDir, fmt.Sprintf("r%d", round), acked)
		s, err := Open(storeDir, Options{MinFreeBytes: -1, MemTableSize: 1 << 20})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		st, err := s.Stream("churn")
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
		n := 0
		for key, seqs := range acked {
			for seq := range seqs {
				if c := seen[key][seq]; c != 1 {
					t.Fatalf("round %d: acknowledged %s/%d stored %d times", round, key, seq, c)
				}
				n++
			}
		}
		t.Logf("round %d: %d acknowledged appends (all rounds) stored once", round, n)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The next round starts on an empty store: a long run of rounds
		// would fill the 64 MiB with what the earlier ones wrote.
		if err := os.RemoveAll(storeDir); err != nil {
			t.Fatal(err)
		}
		clear(acked)
	}
	// The fault happened: Badger went to write a file the filesystem had
	// no blocks for (each, before the blocks were allocated ahead, a
	// SIGBUS).
	if refusedFiles == 0 {
		t.Fatal("no file of Badger's went without blocks: the churn never hit a flush or a compaction")
	}
	t.Logf("%d of Badger's files had no blocks and were errors, not faults", refusedFiles)
}

// filler takes and gives back the free blocks of a filesystem, as another
// process would: files of chunk bytes, allocated with fallocate.
type filler struct {
	dir   string
	files []string
	n     int
}

func (f *filler) free() int64 {
	var fs unix.Statfs_t
	if unix.Statfs(f.dir, &fs) != nil {
		return 0
	}
	return int64(fs.Bavail) * fs.Bsize
}

// take allocates every free block, in files of at most chunk bytes.
func (f *filler) take(chunk int64) {
	for size := chunk; size >= 4096; {
		free := f.free()
		if free < 4096 {
			return
		}
		size = min(size, free)
		name := filepath.Join(f.dir, fmt.Sprintf("fill%d", f.n))
		f.n++
		fd, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return
		}
		err = unix.Fallocate(int(fd.Fd()), 0, 0, size)
		fd.Close()
		if err != nil {
			os.Remove(name)
			size /= 2
			continue
		}
		f.files = append(f.files, name)
	}
}

// give frees the most recent file.
func (f *filler) give() {
	if len(f.files) > 0 {
		os.Remove(f.files[len(f.files)-1])
		f.files = f.files[:len(f.files)-1]
	}
}

func (f *filler) release() {
	for len(f.files) > 0 {
		f.give()
	}
}

// churnRound runs the child on storeDir while a filler holds the tmpfs at
// dir full, giving back a chunk of random size for a random moment (most
// of a millisecond to a few), then gives everything back, waits for
// appends to go on, stops the child and adds what it acknowledged to acked.
func churnRound(t *testing.T, rng *rand.Rand, dir, storeDir, round string, acked map[string]map[uint64]bool) (refusedFiles int) {
	t.Helper()
	cmd := testkit.ChildCommand("churn", churnDirEnv+"="+storeDir, tmpfsRoundEnv+"="+round)
	// A pipe of our own: cmd.Wait (on its own goroutine, so that a death
	// is seen at once) must not close what is still to be read.
	stdout, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	cmd.Stdout = pw
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	err = cmd.Start()
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	count, refused, allocLine, firstRefusal := 0, 0, "", ""
	handle := func(line string) {
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
			if refused++; firstRefusal == "" {
				firstRefusal = line
			}
		case strings.HasPrefix(line, "F "):
			allocLine = line
			fmt.Sscanf(line, "F %d", &refusedFiles)
		case strings.HasPrefix(line, "ERR"):
			t.Errorf("child: %s", line)
		}
	}
	// read handles the child's lines until the deadline or want.
	read := func(until time.Time, want func() bool) {
		for time.Now().Before(until) && !want() {
			select {
			case line, ok := <-lines:
				if !ok {
					return
				}
				handle(line)
			case <-time.After(time.Until(until)):
				return
			}
		}
	}
	// dead reports whether the child died: of a signal, or of the Go
	// runtime's "fatal error: fault" (a SIGBUS in Go code).
	dead := func() string {
		select {
		case <-exited:
		default:
			return ""
		}
		err := cmd.ProcessState
		if ws, ok := err.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("died of %v", ws.Signal())
		}
		return fmt.Sprintf("exited with %v", err)
	}
	go func() {
		cmd.Wait()
		close(exited)
	}()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	read(time.Now().Add(30*time.Second), func() bool { return count >= 2000 })
	if count < 2000 {
		t.Fatalf("the child acknowledged %d appends in 30 s (%s)\n%s", count, dead(), tail(stderr.String(), 3000))
	}
	f := &filler{dir: dir}
	defer f.release()
	// Full, with short openings: the store's checks see room in them,
	// and its flushes and compactions may come a moment later.
	churnFor := 6 * time.Second
	t.Logf("round %s: churning a full tmpfs for %v from %d acknowledged appends", round, churnFor, count)
	start, openings := time.Now(), 0
	for time.Since(start) < churnFor && dead() == "" {
		f.take(4 << 20)
		read(time.Now().Add(time.Duration(rng.IntN(20))*time.Millisecond), func() bool { return false })
		for range 1 + rng.IntN(3) {
			f.give()
		}
		openings++
		read(time.Now().Add(time.Duration(rng.IntN(10000))*time.Microsecond), func() bool { return false })
	}
	before := count
	f.release()
	t.Logf("round %s: %d openings; %d acknowledged, %d refused while churning", round, openings, count, refused)
	if d := dead(); d != "" {
		t.Fatalf("round %s: the child %s while the tmpfs was full:\n%s", round, d, tail(stderr.String(), 3000))
	}
	read(time.Now().Add(60*time.Second), func() bool { return count >= before+500 || dead() != "" })
	if count < before+500 {
		t.Fatalf("round %s: appends did not resume after the space came back: %d acknowledged after it (%s)\n%s",
			round, count-before, dead(), tail(stderr.String(), 3000))
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("round %s: the child did not stop in 60 s of SIGTERM:\n%s", round, tail(stderr.String(), 3000))
	}
	for line := range lines {
		handle(line)
	}
	if cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("round %s: the child %s:\n%s", round, dead(), tail(stderr.String(), 3000))
	}
	files, _ := os.ReadDir(storeDir)
	tables := 0
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".sst") {
			tables++
		}
	}
	t.Logf("round %s: %d acknowledged, %d refused (%s); %d tables; %s", round, count, refused, firstRefusal, tables, allocLine)
	return refusedFiles
}

// TestCompactionWithoutBlocks: a compaction (tables written from tables,
// which no check for room covers) runs on a tmpfs another process has
// filled to 0 bytes. Before Badger's files had their blocks allocated
// ahead it died of a SIGBUS writing the new table; with the allocation it
// gets an error, and it must keep what it read: Badger v4.9.6 dropped a
// table it could not create from the compaction without an error
// (subcompact's `defer inflightBuilders.Done(err)` took err's value, nil,
// when deferred) and lost its keys — until third_party/badger's patch.
// Every appended event is read back after the space is returned.
func TestCompactionWithoutBlocks(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0xc0))
	dir := filepath.Join(t.TempDir(), "fs")
	testkit.MountTmpfs(t, dir, 64<<20)
	storeDir := filepath.Join(dir, "store")
	opts := Options{MinFreeBytes: -1, MemTableSize: 1 << 20}
	s, err := Open(storeDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	st, err := s.CreateStream("c", StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	appended := 0
	appendSome := func() {
		for range 100 {
			payload := make([]byte, 1024) // incompressible: tables of some size
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			binary.BigEndian.PutUint64(payload, uint64(appended))
			if _, err := st.Append(context.Background(), Event{RoutingKey: "k", Writer: "w", Payload: payload}); err != nil {
				t.Fatal(err)
			}
			appended++
		}
	}
	// Tables on two levels: Flatten then has a compaction to run. (Not
	// Reclaim's flush: its DropPrefix compacts every level.)
	appendSome()
	if err := s.flushMemtable(); err != nil {
		t.Fatal(err)
	}
	l0 := func() int {
		n := 0
		for _, ti := range s.db.Tables() {
			if ti.Level == 0 {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); l0() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d tables at level 0 after %d events: the memtable did not fill", l0(), appended)
		}
		appendSome()
	}
	levels := map[int]int{}
	for _, ti := range s.db.Tables() {
		levels[ti.Level]++
	}
	t.Logf("tables by level: %v", levels)
	f := &filler{dir: dir}
	f.take(4 << 20)
	refusedBefore := allocRefused.Load()
	t.Logf("%d events in tables on two levels; tmpfs filled from outside: %d bytes free", appended, f.free())
	err = s.db.Flatten(1)
	refused := allocRefused.Load() - refusedBefore
	t.Logf("compaction with no blocks: %.160v…; %d new tables had no blocks", err, refused)
	if refused == 0 {
		t.Fatal("the compaction found blocks for its tables: the fill did not happen")
	}
	if err == nil {
		t.Error("the compaction found no blocks for its tables and reported no error")
	}
	f.release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(storeDir, opts); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Stream("c"); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	for _, rec := range readAll(t, st) {
		seen[binary.BigEndian.Uint64(rec.Payload)]++
	}
	for i := range uint64(appended) {
		if seen[i] != 1 {
			t.Fatalf("event %d of %d stored %d times after the compaction without blocks (%d read)", i, appended, seen[i], len(seen))
		}
	}
	t.Logf("all %d events read back once", appended)
}

// TestTruncateOnFullTmpfs: a retention deletion writes its tombstones into
// the memtable's log, through mmap, outside any commit — MiBs of them for
// a long backlog. On main (a6731da) the committer did not count them: a
// deletion of 3.6 MiB of tombstones ran past the blocks it had allocated
// ahead, the tmpfs was then filled to 0 by another process, and the next
// append died of "fatal error: fault" in Badger's logFile.writeEntry. Now
// a deletion allocates its tombstones' blocks first (and is refused with
// ErrDiskFull, nothing deleted, when it cannot), and the commits after it
// allocate past them.
func TestTruncateOnFullTmpfs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fs")
	testkit.MountTmpfs(t, dir, 128<<20)
	s, err := Open(filepath.Join(dir, "store"), Options{MinFreeBytes: -1, MemTableSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	ctx := context.Background()
	ev := Event{RoutingKey: "k", Writer: "w", Payload: []byte("0123456789abcdef")}
	var sts []*Stream
	for i := range 32 {
		st, err := s.CreateStream(fmt.Sprintf("s%d", i), StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		sts = append(sts, st)
	}
	// Many entries (one per commit and stream: ~96,000), in tables: the
	// deletion writes ~3.5 MiB of tombstones into the next memtable's log.
	fill := func() {
		var wg sync.WaitGroup
		for _, st := range sts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3000 {
					if _, err := st.Append(ctx, ev); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := s.flushMemtable(); err != nil {
			t.Fatal(err)
		}
		if _, err := sts[0].Append(ctx, ev); err != nil { // the committer follows Badger to the new log
			t.Fatal(err)
		}
	}
	// truncate deletes every stream up to its tail; on an error, which
	// stream refused.
	truncate := func() (*Stream, error) {
		for _, st := range sts {
			if err := st.SetCommittedCut("centre", st.TailCut()); err != nil {
				t.Fatal(err)
			}
			if err := st.Truncate(st.TailCut()); err != nil {
				return st, err
			}
		}
		return nil, nil
	}
	fill()
	if _, err := truncate(); err != nil {
		t.Fatal(err)
	}
	f := &filler{dir: dir}
	defer f.release()
	f.take(4 << 20)
	t.Logf("after a deletion: tmpfs filled from outside, %d bytes free", f.free())
	refused := 0
	for i := 0; refused == 0; i++ {
		if _, err := sts[0].Append(ctx, ev); errors.Is(err, ErrDiskFull) {
			refused++
			t.Logf("append %d after the deletion: %v", i, err)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	f.release()

	// A deletion on a full tmpfs: refused, nothing deleted; with the
	// space back it goes through.
	fill()
	f.take(4 << 20)
	heads, counts := map[*Stream]string{}, map[*Stream]int{}
	for _, st := range sts {
		heads[st], counts[st] = st.HeadCut().String(), len(readAll(t, st))
	}
	st, err := truncate()
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("deletions of MiBs of tombstones on a full tmpfs: %v, want ErrDiskFull", err)
	}
	t.Logf("deletions on the full tmpfs: %s refused: %v", st.Name(), err)
	if got := st.HeadCut().String(); got != heads[st] {
		t.Fatalf("the refused deletion moved the head of %s from %s to %s", st.Name(), heads[st], got)
	}
	if n := len(readAll(t, st)); n != counts[st] {
		t.Fatalf("%s holds %d events after its refused deletion, %d before", st.Name(), n, counts[st])
	}
	f.release()
	if _, err := truncate(); err != nil {
		t.Fatalf("the deletions with the space back: %v", err)
	}
	if _, err := sts[0].Append(ctx, ev); err != nil {
		t.Fatal(err)
	}
}
