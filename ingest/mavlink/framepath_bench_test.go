package mavlink

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/frame"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// nullAppender takes groups and drops them: the frame path's own cost.
type nullAppender struct{}

func (nullAppender) AppendGroupAsync(_ context.Context, _ []localstream.Event, cb func([]localstream.Position, error), _ ...localstream.AppendOption) error {
	cb(nil, nil)
	return nil
}

// BenchmarkFramePath is the intake's CPU per frame without sockets or a
// store: 20 drones' gomavlib-written frames, interleaved, read in 4 KiB
// pieces as from a TCP stream (split, checks, drone slot, sequence window,
// event time, batching). 256 frames a drone, so that the next loop goes
// on with the next sequence numbers. The ns/op is per frame.
func BenchmarkFramePath(b *testing.B) {
	var stream []byte
	ws := make([]*gomavlibWriter, 20)
	for i := range ws {
		ws[i] = newWriter(b, false, uint8(10+i), 1, nil)
	}
	n := 0
	for i := range 256 {
		for _, w := range ws {
			stream = append(stream, w.frame(b, sampleMessages(i)[i%4])...)
			n++
		}
	}
	cfg := localConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	in, err := New(cfg, Sink{Stream: nullAppender{}})
	if err != nil {
		b.Fatal(err)
	}
	in.ctx = context.Background()
	testkit.GrowStack(8)
	b.ResetTimer()
	frames := 0
	for b.Loop() {
		for rest := stream; len(rest) > 0; {
			k := in.consume(rest[:min(len(rest), 4096)], time.Now().UnixNano(), source{conn: 1})
			rest = rest[k:]
		}
		frames += n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
	if s := in.Stats(); s.Duplicates != 0 || s.Lost != 0 {
		b.Fatalf("stats %+v", s)
	}
}

// BenchmarkFramePathSigned is BenchmarkFramePath with signing on: every
// frame signed (gomavlib's checksum and signature), its signature checked
// and its timestamp held against its stream's last (the replay rule).
// The frames are signed again before each loop with newer timestamps
// (outside consume: callgrind's count of consume leaves it out), so that
// none is a replay. The ns/op is per frame, the signing included.
func BenchmarkFramePathSigned(b *testing.B) {
	key := [32]byte{1, 2, 3}
	keyFile := filepath.Join(b.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key[:])), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := localConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Signing = SigningConfig{KeyFile: keyFile, Require: true}
	in, err := New(cfg, Sink{Stream: nullAppender{}})
	if err != nil {
		b.Fatal(err)
	}
	in.ctx = context.Background()
	fw := &frame.Writer{ByteWriter: &bytes.Buffer{}, DialectRW: DefaultDialect().rw}
	if err := fw.Initialize(); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	fw.ByteWriter = &buf
	v2key := frame.NewV2Key(key[:])
	// ts0 is the signing clock now (10 µs units since 2015): every frame
	// is recent; each loop's frames are newer than the last loop's.
	ts0 := uint64(time.Since(time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)) / (10 * time.Microsecond))
	sign := func(loop int) []byte {
		buf.Reset()
		for i := range 256 {
			msg := sampleMessages(i)[i%4]
			mp := DefaultDialect().rw.GetMessage(msg.GetID())
			for d := range 20 {
				f := &frame.V2Frame{IncompatibilityFlag: frame.V2FlagSigned, SequenceNumber: uint8(i), SystemID: uint8(10 + d), ComponentID: 1,
					Message: mp.Write(msg, true), SignatureTimestamp: ts0 + uint64(loop*256+i)}
				f.Checksum = f.GenerateChecksum(mp.CRCExtra())
				f.Signature = f.GenerateSignature(v2key)
				if err := fw.Write(f); err != nil {
					b.Fatal(err)
				}
			}
		}
		return buf.Bytes()
	}
	const n = 256 * 20
	testkit.GrowStack(8)
	frames, loop := 0, 0
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		stream := sign(loop)
		loop++
		b.StartTimer()
		t0 := time.Now()
		for rest := stream; len(rest) > 0; {
			k := in.consume(rest[:min(len(rest), 4096)], time.Now().UnixNano(), source{conn: 1})
			rest = rest[k:]
		}
		elapsed += time.Since(t0)
		frames += n
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(frames), "ns/frame")
	if s := in.Stats(); s.Duplicates != 0 || s.Lost != 0 || s.BadSignature != 0 || s.SignatureReplayed != 0 {
		b.Fatalf("stats %+v", s)
	}
}
