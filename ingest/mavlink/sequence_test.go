package mavlink

import (
	"bytes"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// sendOrder sends the frames of one component to the intake's UDP
// server, one datagram each, in the order of idx (indices into frames,
// numbered 0, 1, 2, ... by gomavlib's writer).
func sendOrder(t *testing.T, in *Intake, frames [][]byte, idx ...int) {
	t.Helper()
	udp := udpSender(t, in.UDPAddr())
	for _, i := range idx {
		if _, err := udp.Write(frames[i]); err != nil {
			t.Fatal(err)
		}
	}
}

func componentFrames(t *testing.T, sysid uint8, n int) [][]byte {
	t.Helper()
	w := newWriter(t, false, sysid, 1, nil)
	var fs [][]byte
	for i := range n {
		fs = append(fs, w.frame(t, sampleMessages(i)[i%5]))
	}
	return fs
}

// TestLateCopiesStoredOnce is issue 37's case 1: two radios merged by a
// router that does not de-duplicate deliver seq 0 1 2 3 2 3 4 5. Each
// frame is stored once (6, in first-arrival order), the two late copies
// are counted duplicates, nothing is lost and only the first frame is
// flagged. Before the shared window, 8 were stored: only a repeat of the
// very last frame was a duplicate.
func TestLateCopiesStoredOnce(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	in, _ := runIntake(t, localConfig(), st, nil)
	fs := componentFrames(t, 9, 6)
	sendOrder(t, in, fs, 0, 1, 2, 3, 2, 3, 4, 5)
	testkit.WaitFor(t, 10*time.Second, "8 frames taken, stored or dropped", func() bool {
		s := in.Stats()
		return s.Frames == 8 && s.Stored+s.Duplicates == 8
	})
	recs := byDrone(t, st)["mavlink-9"]
	ds, _ := in.Stats().Drone(9)
	if len(recs) != 6 || ds.Duplicates != 2 || ds.Lost != 0 {
		t.Fatalf("%d stored for 6 sent (duplicates %d, lost %d)", len(recs), ds.Duplicates, ds.Lost)
	}
	for i, r := range recs {
		if !bytes.Equal(r.Payload, fs[i]) {
			t.Fatalf("event %d is not frame %d", i, i)
		}
		if r.Flags.Has(localstream.FlagDiscontinuity) != (i == 0) {
			t.Fatalf("event %d: discontinuity %v", i, i != 0)
		}
	}
}

// TestSwappedPairNotLost is issue 37's case 2: seq 0 1 3 2 4 5, every
// frame arrived. Nothing is counted lost; the frame that came over the
// hole (3) is flagged, as the store's order has a gap before it, but the
// late frame that fills the hole (2) and the ones after it are not.
// Before the shared window, the late frame moved "last seen" back, so 4
// looked like a gap: 2 lost and 4 events flagged. 64 frames in order
// follow, so that a hole, if one were left, would have left the window
// and been counted.
func TestSwappedPairNotLost(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	in, _ := runIntake(t, localConfig(), st, nil)
	fs := componentFrames(t, 10, 6+64)
	order := []int{0, 1, 3, 2, 4, 5}
	for i := 6; i < len(fs); i++ {
		order = append(order, i)
	}
	sendOrder(t, in, fs, order...)
	testkit.WaitFor(t, 10*time.Second, "every frame stored", func() bool { return in.Stats().Stored == uint64(len(fs)) })
	ds, _ := in.Stats().Drone(10)
	if ds.Lost != 0 || ds.Discontinuities != 2 {
		t.Fatalf("lost %d, %d events flagged discontinuity: want 0 lost, 2 flagged (the first, and 3 over the hole)", ds.Lost, ds.Discontinuities)
	}
	recs := byDrone(t, st)["mavlink-10"]
	for i, r := range recs {
		if !bytes.Equal(r.Payload, fs[order[i]]) {
			t.Fatalf("event %d is not frame %d", i, order[i])
		}
		if want := i == 0 || order[i] == 3; r.Flags.Has(localstream.FlagDiscontinuity) != want {
			t.Fatalf("event %d (frame %d): discontinuity %v, want %v", i, order[i], !want, want)
		}
	}
}
