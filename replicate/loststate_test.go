package replicate

import (
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// Lost local or central state (issue 11): real Badger stores whose
// directory is deleted or whose tail is cut, a real embedded JetStream
// whose files are replaced by an older copy.

// producer appends events with unique payloads ("<tag>-<n>") to whatever
// stream it is given, and remembers every acknowledged one with its local
// position and the store it went to.
type producer struct {
	mu    sync.Mutex
	n     int
	acked map[string]ackedEvent
	base  int64
	tag   string
}

type ackedEvent struct {
	pos   localstream.Position
	store string
}

func newProducer() *producer {
	return &producer{acked: map[string]ackedEvent{}, base: time.Now().UnixNano(), tag: newInstance()[:6]}
}

// add appends k events to st (drones round robin) and notes their marks.
func (p *producer) add(t testing.TB, st *localstream.Stream, k int) {
	t.Helper()
	for range k {
		if err := p.one(st); err != nil {
			t.Fatal(err)
		}
	}
}

func (p *producer) one(st *localstream.Stream) error {
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	d := fmt.Sprintf("%d-drone", n%8)
	ev := localstream.Event{RoutingKey: d, Writer: "telemetry/" + d, EventTime: p.base + int64(n)*1000,
		IngestTime: time.Now().UnixNano(), ContentType: "text/plain", Payload: fmt.Appendf(nil, "%s-%d", p.tag, n)}
	pos, err := st.Append(context.Background(), ev)
	if err != nil {
		return err
	}
	if tr := trackerFor(st); tr != nil {
		if err := tr.Note(ev.Writer, ev.EventTime, pos); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.acked[string(ev.Payload)] = ackedEvent{pos: pos, store: st.Store().ID()}
	p.mu.Unlock()
	return nil
}

// flow appends an event every interval until ctx ends; the stream is read
// from cur at each append (it is replaced across a fault).
func (p *producer) flow(ctx context.Context, cur *atomic.Pointer[localstream.Stream], interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if st := cur.Load(); st != nil {
				p.one(st) // a closed store refuses; the event was not acknowledged
			}
		}
	}
}

// waitAcked waits until k events more than now are acknowledged: a flow
// of k events however loaded the machine is, where a fixed sleep may see
// few.
func (p *producer) waitAcked(t testing.TB, k int, what string) {
	t.Helper()
	acked := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.acked)
	}
	before := acked()
	testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%d more events acknowledged (%s)", k, what), func() bool { return acked() >= before+k })
}

// truncateLocalTail deletes the last entries of every segment of stream
// in the (closed) store at dir, at least n events of each where it has as
// many, as a power cut in periodic durability loses its last commits (an
// entry is one event or the record batch of one commit, see
// localstream/doc.go). It returns how many events it deleted.
func truncateLocalTail(t testing.TB, dir, stream string, n int) int {
	t.Helper()
	if err := localstream.ReleaseDir(dir); err != nil {
		t.Fatal(err)
	}
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	type entry struct {
		key    []byte
		events int
	}
	prefix := append([]byte{'d', byte(len(stream))}, stream...)
	bySeg := map[uint64][]entry{}
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			seg := binary.BigEndian.Uint64(k[len(prefix):])
			e := entry{key: k, events: 1}
			err := it.Item().Value(func(v []byte) error {
				if len(v) > 1 && v[0] == 4 { // a compressed record batch: version 4, S2 of a version 3
					d, err := s2.Decode(nil, v[1:])
					if err != nil {
						return err
					}
					v = d
				}
				if len(v) > 1 && v[0] == 3 { // a record batch: version 3, uvarint count
					c, _ := binary.Uvarint(v[1:])
					e.events = int(c)
				}
				return nil
			})
			if err != nil {
				return err
			}
			bySeg[seg] = append(bySeg[seg], e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	err = db.Update(func(txn *badger.Txn) error {
		for _, entries := range bySeg {
			for i, lost := len(entries)-1, 0; i >= 0 && lost < n; i-- {
				if err := txn.Delete(entries[i].key); err != nil {
					return err
				}
				lost += entries[i].events
				deleted += entries[i].events
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return deleted
}

// copyDir copies a directory tree (the central's files while it is down).
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// restoreCentral replaces the central's files by an older copy.
func restoreCentral(t testing.TB, storeDir, backup string) {
	t.Helper()
	if err := os.RemoveAll(storeDir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, storeDir)
}

// lossReport is what the centre says about one agent's stream.
type lossReport struct {
	events  map[string]localstream.Position // payload → central position
	lost    []wire.LostRange
	commits []wire.CommitRecord
}

// readLoss reads the agent's central stream and checks what holds
// whatever was lost: every central position and every payload once, the
// commit chain's watermarks monotone, no central event inside a reported
// gap.
func readLoss(t testing.TB, nc *nats.Conn, agent string) lossReport {
	t.Helper()
	items, err := centralread.ReadAll(testCtx(t, 60*time.Second), nc, testStream, centralread.ReadOptions{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	rep := lossReport{events: map[string]localstream.Position{}}
	positions := map[localstream.Position]string{}
	var lower, upper int64
	for _, it := range items {
		switch it.Kind {
		case centralread.ItemCommit:
			c := it.Commit
			if c.Watermark.LowerNs < lower || c.Watermark.UpperNs < upper {
				t.Fatalf("seq %d: committed watermark moved back: (%d, %d) after (%d, %d)", it.Seq, c.Watermark.LowerNs, c.Watermark.UpperNs, lower, upper)
			}
			lower, upper = c.Watermark.LowerNs, c.Watermark.UpperNs
			rep.commits = append(rep.commits, c)
			if c.Lost != nil {
				rep.lost = append(rep.lost, *c.Lost)
			}
		case centralread.ItemEvent:
			r := it.Event.Record
			pl := string(r.Payload)
			if p, dup := rep.events[pl]; dup {
				t.Fatalf("seq %d: event %s twice at the centre (%s and %s)", it.Seq, pl, p, r.Position)
			}
			if other, reused := positions[r.Position]; reused {
				t.Fatalf("seq %d: central position %s reused: %s and %s", it.Seq, r.Position, other, pl)
			}
			rep.events[pl] = r.Position
			positions[r.Position] = pl
		}
	}
	for pl, p := range rep.events {
		if g := rep.inGap(p); g != nil {
			t.Fatalf("event %s at %s is both at the centre and inside reported gap %s", pl, p, g)
		}
	}
	return rep
}

// inGap returns the reported gap holding central position p, if any.
func (r lossReport) inGap(p localstream.Position) *wire.LostRange {
	for i, g := range r.lost {
		from, ok := g.From[fmt.Sprint(uint64(p.Segment))]
		if !ok || p.Offset < from {
			continue
		}
		if len(g.To) > 0 {
			if to, ok := g.To[fmt.Sprint(uint64(p.Segment))]; ok && p.Offset >= to {
				continue
			}
		}
		return &r.lost[i]
	}
	return nil
}

// checkAccounted proves the crash-matrix property: every acknowledged
// event is at the centre exactly once (readLoss) or inside a reported gap
// at the position it had under base 0 (the base before any fault); and at
// most maxLost are lost. It returns how many are lost.
func checkAccounted(t testing.TB, rep lossReport, p *producer, maxLost int) int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	lost := 0
	for pl, a := range p.acked {
		if _, ok := rep.events[pl]; ok {
			continue
		}
		if g := rep.inGap(a.pos); g == nil {
			t.Fatalf("event %s (local %s, store %s) neither at the centre nor inside a reported gap (gaps %v)", pl, a.pos, a.store, rep.lost)
		}
		lost++
	}
	if lost > maxLost {
		t.Fatalf("%d events lost, at most %d expected", lost, maxLost)
	}
	return lost
}

// node is one agent process: a store, its stream, a replicator.
type node struct {
	dir   string
	store *localstream.Store
	st    *localstream.Stream
	rp    *replica
}

func startNode(t testing.TB, nc *nats.Conn, dir, agent string, cfg ReplicatorConfig) *node {
	t.Helper()
	s, st := openStore(t, dir)
	n := &node{dir: dir, store: s, st: st}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Station == "" {
		cfg.Station = testStation // one station, unless a test says another
	}
	n.rp = startReplica(t, nc, st, agent, cfg, JetStreamOptions{})
	return n
}

func (n *node) stop(t testing.TB) {
	t.Helper()
	n.rp.close()
	if err := n.store.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitAllAt waits until every event the producer acknowledged to store is
// at the centre (the replicator moves).
func waitAllAt(t testing.TB, nc *nats.Conn, n *node, agent string, p *producer, d time.Duration) {
	t.Helper()
	tail := n.st.TailCut()
	if testkit.Until(d, func() bool {
		c, err := lastCommitted(context.Background(), nc, testStream, agent, 2*time.Second)
		if err != nil {
			return false
		}
		cut, ok := n.rp.r.localCut(c)
		le, _ := n.st.Topology().LessEq(tail, cut)
		return ok && le
	}) {
		return
	}
	s := n.rp.r.Stats()
	t.Fatalf("replication did not reach the local tail %s in %s: state %s, last cut %s, error %q, stopped %q", tail, d, s.State, s.CommittedCut, s.LastError, s.Stopped)
}
