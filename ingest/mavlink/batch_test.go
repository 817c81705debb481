package mavlink

import (
	"bytes"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestBatchGroups: the frames taken are appended as groups of
// BatchFrames (one store commit each) and, when Run ends, the rest of
// the last batch is durable before it returns; per drone in order, byte
// for byte.
func TestBatchGroups(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.BatchWindow, cfg.BatchFrames = 5*time.Second, 100 // only full groups, and the rest at the end
	in, stop := runIntake(t, cfg, st, nil)
	c, err := net.Dial("tcp", in.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ws := []*gomavlibWriter{newWriter(t, false, 1, 1, nil), newWriter(t, true, 2, 1, nil)}
	var sent [2][][]byte
	commits := s.Stats().Commits // before the first frame: the intake may commit both groups before the loop ends
	for i := range 250 {
		d := i % 2
		f := ws[d].frame(t, sampleMessages(i)[i%4])
		sent[d] = append(sent[d], f)
		if _, err := c.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "two full groups", func() bool { return in.Stats().Stored == 200 })
	testkit.WaitFor(t, 10*time.Second, "the last 50 taken", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return len(in.batch.evs) == 50
	})
	if n := in.Stats().Stored; n != 200 {
		t.Fatalf("%d stored with a 5 s window and groups of 100: want 200 (the rest held)", n)
	}
	if n := s.Stats().Commits - commits; n < 1 || n > 2 { // two, or one when the store took both at once
		t.Fatalf("two groups of 100 took %d commits, want 1 or 2", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := in.Stats().Stored; n != 250 {
		t.Fatalf("%d stored once Run returned, want every frame taken (250)", n)
	}
	got := byDrone(t, st)
	for d, id := range []string{"mavlink-1", "mavlink-2"} {
		if len(got[id]) != len(sent[d]) {
			t.Fatalf("%s: %d stored, %d sent", id, len(got[id]), len(sent[d]))
		}
		for i, r := range got[id] {
			if !bytes.Equal(r.Payload, sent[d][i]) {
				t.Fatalf("%s frame %d: stored % x, sent % x", id, i, r.Payload, sent[d][i])
			}
		}
	}
}

// TestBatchWindowEnds: a batch that does not fill is appended when its
// window ends, in one commit.
func TestBatchWindowEnds(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.BatchWindow = 50 * time.Millisecond
	in, _ := runIntake(t, cfg, st, nil)
	w := newWriter(t, false, 7, 1, nil)
	var b []byte
	for i := range 40 {
		b = append(b, w.frame(t, sampleMessages(i)[i%4])...)
	}
	commits := s.Stats().Commits
	start := time.Now()
	if _, err := udpSender(t, in.UDPAddr()).Write(b); err != nil { // one datagram: one batch
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the batch stored", func() bool { return in.Stats().Stored == 40 })
	if n := s.Stats().Commits - commits; n != 1 {
		t.Fatalf("one batch of 40 took %d commits", n)
	}
	t.Logf("stored %v after the datagram (window 50ms)", time.Since(start))
}

// TestDiskFullGroupFlagged: a group the store refuses for lack of space
// is counted frame by frame (disk_full_drops), and each drone's next
// stored frame is flagged discontinuity.
func TestDiskFullGroupFlagged(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 40)
	s, err := localstream.Open(t.TempDir(), localstream.Options{Logger: slog.New(slog.DiscardHandler), MinFreeBytes: 1 << 20,
		FreeSpace: func(string) (int64, error) { return free.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st, err := s.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := localConfig()
	cfg.BatchWindow = -1 // a group per datagram
	in, _ := runIntake(t, cfg, st, nil)
	udp := udpSender(t, in.UDPAddr())
	ws := []*gomavlibWriter{newWriter(t, false, 1, 1, nil), newWriter(t, false, 2, 1, nil)}
	var sent [2][][]byte
	send := func(n int) { // a datagram holding a frame of each drone
		for i := range n {
			var b []byte
			for d, w := range ws {
				f := w.frame(t, sampleMessages(i)[1])
				sent[d] = append(sent[d], f)
				b = append(b, f...)
			}
			if _, err := udp.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(10)
	testkit.WaitFor(t, 10*time.Second, "stored", func() bool { return in.Stats().Stored == 20 })
	free.Store(0)
	testkit.WaitFor(t, 10*time.Second, "the store below its floor", s.BelowFloor)
	send(5)
	testkit.WaitFor(t, 10*time.Second, "refused groups counted", func() bool { return in.Stats().DiskFullDrops == 10 })
	free.Store(1 << 40)
	testkit.WaitFor(t, 10*time.Second, "the store above its floor", func() bool { return !s.BelowFloor() })
	send(10)
	testkit.WaitFor(t, 10*time.Second, "stored", func() bool { return in.Stats().Stored == 40 })
	got := byDrone(t, st)
	for d, id := range []string{"mavlink-1", "mavlink-2"} {
		recs := got[id]
		if len(recs) != 20 {
			t.Fatalf("%s: %d stored, want 20", id, len(recs))
		}
		for i, r := range recs {
			want := sent[d][i]
			if i >= 10 {
				want = sent[d][i+5] // the 5 refused are not there
			}
			if !bytes.Equal(r.Payload, want) {
				t.Fatalf("%s frame %d differs", id, i)
			}
			if flagged := r.Flags.Has(localstream.FlagDiscontinuity); flagged != (i == 0 || i == 10) {
				t.Fatalf("%s frame %d: discontinuity %v, want it on the first and on the one after the refused", id, i, flagged)
			}
		}
	}
}

// TestUDPLossAtIntakeCounted: datagrams the kernel drops at the intake's
// socket (its buffer full while the intake is held up) are counted, by
// the socket (kernel_drops) and per drone from the sequence numbers
// (lost): stored + lost = sent, nothing silent.
func TestUDPLossAtIntakeCounted(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.SocketBuffer = 4096 // the kernel's least: a few datagrams
	in, _ := runIntake(t, cfg, st, nil)
	udp := udpSender(t, in.UDPAddr())
	w := newWriter(t, false, 9, 1, nil)
	sent := 0
	sendOne := func() {
		if _, err := udp.Write(w.frame(t, sampleMessages(sent)[2])); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	sendOne()
	testkit.WaitFor(t, 10*time.Second, "the first frame stored", func() bool { return in.Stats().Stored == 1 })
	in.mu.Lock() // the intake held up: the socket's buffer fills
	for range 200 {
		sendOne()
	}
	addr := in.UDPAddr().(*net.UDPAddr)
	testkit.WaitFor(t, 10*time.Second, "the kernel dropping datagrams", func() bool { _, drops := testkit.UDPQueue(t, addr); return drops > 0 })
	in.mu.Unlock()
	testkit.WaitFor(t, 10*time.Second, "the socket's buffer read", func() bool { queued, _ := testkit.UDPQueue(t, addr); return queued == 0 })
	sendOne() // carries the kernel's count, and ends the gap
	testkit.WaitFor(t, 10*time.Second, "the last frame stored", func() bool {
		ds, _ := in.Stats().Drone(9)
		return ds.Stored+ds.Lost == uint64(sent)
	})
	s := in.Stats()
	ds, _ := s.Drone(9)
	t.Logf("sent %d: stored %d, lost %d, kernel drops %d", sent, ds.Stored, ds.Lost, s.KernelDrops)
	if ds.Lost == 0 || s.KernelDrops != ds.Lost {
		t.Fatalf("lost %d, kernel drops %d: want the same count > 0 (all loss at the socket)", ds.Lost, s.KernelDrops)
	}
	recs := byDrone(t, st)["mavlink-9"]
	flagged := 0
	for _, r := range recs[1:] {
		if r.Flags.Has(localstream.FlagDiscontinuity) {
			flagged++
		}
	}
	if flagged == 0 {
		t.Fatal("no stored frame flagged after the loss")
	}
}
