package unpack

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/wire"
)

// badPack takes the first pack of the source stream (a real one, version
// 2) and spoils it: "version" sets the envelope's version to 3 (a pack
// from an agent upgraded before the centre), "checksum" flips a byte of
// its body (the CRC-32C fails).
func badPack(t *testing.T, nc *nats.Conn, how string) *nats.Msg {
	t.Helper()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), wire.StreamName(testStream))
	if err != nil {
		t.Fatal(err)
	}
	var raw *jetstream.RawStreamMsg
	for seq := uint64(1); raw == nil || !strings.HasSuffix(raw.Subject, ".cut"); seq++ {
		if raw, err = st.GetMsg(context.Background(), seq); err != nil {
			t.Fatal(err)
		}
	}
	data := append([]byte(nil), raw.Data...)
	// 0xE2, codec 1, then the envelope: magic (4), size (4), version, CRC.
	if len(data) < 16 || data[0] != 0xE2 || binary.LittleEndian.Uint32(data[2:]) != 0x184D2A5E {
		t.Fatalf("first pack is not a version-2 pack: % x", data[:min(len(data), 16)])
	}
	switch how {
	case "version":
		data[10] = 3
	case "checksum":
		data[len(data)-1] ^= 0xFF
		if crc32.Checksum(data[15:], crc32.MakeTable(crc32.Castagnoli)) == binary.LittleEndian.Uint32(data[11:]) {
			t.Fatal("the flipped byte kept the checksum")
		}
	}
	// From an agent of its own, so that the real agent's chain goes on.
	m := nats.NewMsg(wire.CutSubject(testStream, "gs-9"))
	m.Data = data
	for k, v := range raw.Header {
		m.Header[k] = v
	}
	if _, _, err := wire.DecodeMessage(m.Subject, m.Header, m.Data); err == nil {
		t.Fatalf("the %s-spoilt pack decodes", how)
	}
	return m
}

// TestUndecodablePackStops: a source pack the unpacker cannot decode (a
// newer version, a failed checksum) stops it there — the error in its
// stats and log, the derived stream's cursor before the pack, nothing
// after it republished — until the operator names that sequence in
// Options.Skip: then a marker names what was skipped and the events
// after it follow, once.
func TestUndecodablePackStops(t *testing.T) {
	for _, how := range []string{"version", "checksum"} {
		t.Run(how, func(t *testing.T) {
			srv := rigs.StartCentral(t, central.Config{})
			nc := connect(t, srv.ClientURL())
			a := newTestAgent(t, "gs-1", 2)
			r, stopRep := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
			for range 10 {
				if err := a.appendRound(); err != nil {
					t.Fatal(err)
				}
			}
			a.waitReplicated(t, r, 30*time.Second)
			before := total(a)
			bad := badPack(t, nc, how)
			js, _ := jetstream.New(nc)
			pa, err := js.PublishMsg(context.Background(), bad)
			if err != nil {
				t.Fatal(err)
			}
			badSeq := pa.Sequence
			for range 10 {
				if err := a.appendRound(); err != nil {
					t.Fatal(err)
				}
			}
			a.waitReplicated(t, r, 30*time.Second)
			stopRep()
			st, _ := js.Stream(context.Background(), wire.StreamName(testStream))
			lastSrc := st.CachedInfo().State.LastSeq

			log := &testkit.SyncBuffer{}
			u, stop := startUnpacker(t, nc, Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
			testkit.WaitFor(t, 30*time.Second, "the unpacker to reach the bad pack", func() bool { return u.Stats().SourceSeq >= badSeq })
			testkit.WaitFor(t, 30*time.Second, "the unpacker to stop at the bad pack (or move past it)", func() bool {
				return u.Stats().State == StateBlocked || u.Stats().SourceSeq == lastSrc && derivedLast(nc, testStream) > uint64(before)
			})
			if got := derivedLast(nc, testStream); got != uint64(before) {
				t.Fatalf("the unpacker moved past undecodable source seq %d: derived holds %d events, %d before the pack; stats %+v", badSeq, got, before, u.Stats())
			}
			s := u.Stats()
			if s.State != StateBlocked || !strings.Contains(s.Error, "source seq") || s.BlockedSeq != badSeq {
				t.Fatalf("stats at the bad pack: %+v", s)
			}
			testkit.WaitFor(t, 10*time.Second, "the stop in the log", func() bool { return strings.Contains(log.String(), "does not decode") })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			// A restart stops there again: the cursor did not move.
			u2, stop2 := startUnpacker(t, nc, Options{})
			testkit.WaitFor(t, 30*time.Second, "a restart to stop at the bad pack again", func() bool { return u2.Stats().State == StateBlocked })
			if got := derivedLast(nc, testStream); got != uint64(before) {
				t.Fatalf("after a restart the derived stream holds %d, want %d", got, before)
			}
			stop2()

			// The operator skips it.
			u3, _ := startUnpacker(t, nc, Options{Skip: []uint64{badSeq}})
			testkit.WaitFor(t, 30*time.Second, "the skip and the rest", func() bool { return derivedLast(nc, testStream) == uint64(total(a)+1) })
			der, _ := derivedEvents(t, nc, testStream)
			var markers int
			for i, ev := range der {
				if ev.Seq == badSeq {
					markers++
					if i != before || ev.Dropped == "" || !strings.Contains(ev.Dropped, "skipped") || ev.Agent != "gs-9" {
						t.Fatalf("skip marker at %d: %+v", i, ev)
					}
				}
			}
			if markers != 1 || u3.Stats().Skipped != 1 {
				t.Fatalf("%d skip markers, stats %+v", markers, u3.Stats())
			}
			// A restart after the skip, without --skip, goes on behind it.
			for range 5 {
				if err := a.appendRound(); err != nil {
					t.Fatal(err)
				}
			}
			r2, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
			a.waitReplicated(t, r2, 30*time.Second)
			u4, _ := startUnpacker(t, nc, Options{})
			testkit.WaitFor(t, 30*time.Second, "a restart behind the skip", func() bool { return derivedLast(nc, testStream) == uint64(total(a)+1) })
			if u4.Stats().State == StateBlocked {
				t.Fatalf("blocked after the skip: %+v", u4.Stats())
			}
		})
	}
}
