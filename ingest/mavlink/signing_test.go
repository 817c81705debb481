package mavlink

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/message"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// signedAt is a MAVLink 2 frame signed by gomavlib (its checksum,
// signature and frame writer) with the signing timestamp of at, as a
// sender whose frames were recorded at that time sends them.
func signedAt(t testing.TB, key [32]byte, sysid, compid, link, seq uint8, msg message.Message, at time.Time) []byte {
	t.Helper()
	mp := DefaultDialect().rw.GetMessage(msg.GetID())
	f := &frame.V2Frame{IncompatibilityFlag: frame.V2FlagSigned, SequenceNumber: seq, SystemID: sysid, ComponentID: compid,
		Message: mp.Write(msg, true), SignatureLinkID: link,
		SignatureTimestamp: uint64(at.Sub(time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)) / (10 * time.Microsecond))}
	f.Checksum = f.GenerateChecksum(mp.CRCExtra())
	f.Signature = f.GenerateSignature(frame.NewV2Key(key[:]))
	return gomavlibBytes(t, f)
}

// gomavlibBytes is fr as gomavlib's frame writer writes it, fields as they are.
func gomavlibBytes(t testing.TB, fr frame.Frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := &frame.Writer{ByteWriter: &buf, DialectRW: DefaultDialect().rw}
	if err := w.Initialize(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(fr); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// signingRun is one run of an intake with signing on a store in dir,
// stopped (and the store closed) by stop.
type signingRun struct {
	in    *Intake
	st    *localstream.Stream
	udp   func(...[]byte)
	stop  func()
	store *localstream.Store
}

func startSigningRun(t *testing.T, dir string, cfg Config) *signingRun {
	t.Helper()
	store, st := rigs.OpenStream(t, dir, localstream.Options{}, "telemetry", localstream.StreamConfig{})
	cfg.Logger = slog.New(slog.DiscardHandler)
	in, err := New(cfg, signingSink(st))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Bind(); err != nil {
		t.Fatal(err)
	}
	stopIn := testkit.Run(t, in.Run, in.Ready())
	c := udpSender(t, in.UDPAddr())
	r := &signingRun{in: in, st: st, store: store}
	r.udp = func(fs ...[]byte) {
		for _, f := range fs {
			if _, err := c.Write(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.stop = func() {
		if err := stopIn(); err != nil {
			t.Fatal(err)
		}
		store.Close()
	}
	return r
}

// TestSigningReplayRefused is issue 37's case 3. Frames signed 10
// minutes ago are refused (signature_replayed) after a restart of the
// intake and its store, and after their drone's slot was given to
// another drone and back: a new stream more than a minute behind the
// receiver's clock is refused, and the last timestamp of each stream is
// kept in the store with the events, so frames recorded seconds before a
// restart are refused after it too. Fresh frames are stored.
func TestSigningReplayRefused(t *testing.T) {
	dir := t.TempDir()
	key, _ := parseKey("replayed frames are refused")
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(hex.EncodeToString(key[:])), 0o600)
	clock := &fakeClock{now: time.Now()}
	cfg := localConfig()
	cfg.Signing = SigningConfig{KeyFile: keyFile}
	cfg.Drones = map[uint8]string{1: "alpha"}
	cfg.MaxDrones, cfg.Now = 1, clock.Now
	msg := sampleMessages(0)[2]
	frames := func(sysid, link uint8, seq0 int, at time.Time, n int) [][]byte {
		var fs [][]byte
		for i := range n {
			fs = append(fs, signedAt(t, key, sysid, 1, link, uint8(seq0+i), msg, at.Add(time.Duration(i)*time.Millisecond)))
		}
		return fs
	}
	stored := func(r *signingRun, drone string) int { return len(byDrone(t, r.st)[drone]) }

	// Run 1: alpha's recent frames are stored.
	r := startSigningRun(t, dir, cfg)
	recent := frames(1, 0, 0, clock.Now(), 20)
	r.udp(recent...)
	testkit.WaitFor(t, 10*time.Second, "run 1 stored", func() bool { return r.in.Stats().Stored == 20 })
	r.stop()

	// Run 2, after a restart: frames signed 10 minutes ago, and run 1's
	// frames replayed (seconds old), are all refused; fresh ones stored.
	clock.Add(5 * time.Second)
	r = startSigningRun(t, dir, cfg)
	old := frames(1, 0, 100, clock.Now().Add(-10*time.Minute), 20)
	oldOtherLink := frames(1, 7, 150, clock.Now().Add(-10*time.Minute), 20)
	r.udp(old...)
	r.udp(oldOtherLink...)
	r.udp(recent...)
	fresh := frames(1, 0, 200, clock.Now(), 20)
	r.udp(fresh...)
	testkit.WaitFor(t, 10*time.Second, "run 2: every frame taken", func() bool {
		s := r.in.Stats()
		return s.Frames == 80 && s.Stored+s.SignatureReplayed == 80
	})
	if s := r.in.Stats(); s.SignatureReplayed != 60 || s.Stored != 20 {
		t.Fatalf("after a restart: %d stored, %d refused as replayed: want the 20 fresh stored, 60 (20 signed 10 min ago on each of two links, 20 of the last run) refused", s.Stored, s.SignatureReplayed)
	}
	if n := stored(r, "alpha"); n != 40 {
		t.Fatalf("alpha has %d events, want 40", n)
	}

	// A discovered drone (system 2) gives its slot to system 3 and takes
	// it back: its frames signed 10 minutes ago, and its own replayed,
	// are refused; fresh ones are stored.
	d2 := frames(2, 1, 0, clock.Now(), 5)
	r.udp(d2...)
	testkit.WaitFor(t, 10*time.Second, "drone 2 stored", func() bool { return r.in.Stats().Stored == 25 })
	clock.Add(2 * cfg.withDefaults().DroneIdleTimeout)
	r.udp(frames(3, 1, 0, clock.Now(), 5)...)
	testkit.WaitFor(t, 10*time.Second, "drone 3 took the slot", func() bool { return r.in.Stats().Stored == 30 })
	clock.Add(2 * cfg.withDefaults().DroneIdleTimeout)
	r.udp(frames(2, 1, 50, clock.Now().Add(-10*time.Minute), 20)...)
	r.udp(d2...)
	r.udp(frames(2, 1, 100, clock.Now(), 5)...)
	testkit.WaitFor(t, 10*time.Second, "drone 2's frames taken", func() bool {
		s := r.in.Stats()
		return s.Frames == 80+5+5+30 && s.Stored+s.SignatureReplayed == 120
	})
	if s := r.in.Stats(); s.DronesReleased != 2 || s.SignatureReplayed != 60+25 || stored(r, DiscoveredID(2)) != 10 {
		t.Fatalf("after the slot was released: %d released, %d refused (want 85), drone 2 has %d events (want 10)", s.DronesReleased, s.SignatureReplayed, stored(r, DiscoveredID(2)))
	}
	r.stop()
}

// signingSink reads the signing timestamps back from the stream's store,
// as the agent wires it.
func signingSink(st *localstream.Stream) Sink { return Sink{Stream: st, Meta: st.Store()} }

// FuzzSigningMeta: a kept timestamp entry is read back as written, and
// any other key or value is refused, never taken.
func FuzzSigningMeta(f *testing.F) {
	f.Add("mavlink/signing/01c802", []byte{0, 0, 1, 2, 3, 4, 5, 6})
	f.Add("mavlink/signing/zz", []byte{1})
	f.Add("mavlink/signing/-00001", []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add("mavlink/signing/01C802", []byte{0, 0, 1, 2, 3, 4, 5, 6})
	f.Fuzz(func(t *testing.T, key string, v []byte) {
		k, ts, err := parseSigningMeta(key, v)
		if err != nil {
			return
		}
		if signingMetaKey(k) != key || !bytes.Equal(binary.BigEndian.AppendUint64(nil, ts), v) {
			t.Fatalf("%q % x read as stream %x, timestamp %d", key, v, k, ts)
		}
	})
}
