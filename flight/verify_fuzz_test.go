package flight

import (
	"math/rand/v2"
	"runtime"

	"bytes"
	"crypto/ed25519"
	"testing"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// FuzzVerify: a record is untrusted input — any bytes give a report or an
// error, never a panic or a hang; a valid record mutated never verifies
// as intact unless the mutation left its content alone. The seed is the
// tiny record (3 kB, the small record is 7 kB): the fuzzer minimizes each
// input that widens coverage by running it again for the bytes it might
// drop, work that grows with the input and that it does not count as
// execs (.ci/fuzz caps it). Video messages' decoder has its own target
// (FuzzDecodeVideo).
func FuzzVerify(f *testing.F) {
	rec, pub := tinyRecord(f)
	want := mustCert(f, rec, pub)
	f.Add(rec)
	f.Add(rec[:len(rec)/2])
	f.Add([]byte("\x89MCAP0\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := Verify(bytes.NewReader(b), VerifyOptions{Trusted: []ed25519.PublicKey{pub}})
		if err != nil || rep.Err() != nil {
			return
		}
		// Intact: then its chain and counts are the certificate's, so the
		// events are the original's (the signature covers them).
		if rep.Certificate.Chain != want.Chain {
			t.Fatalf("a changed record verified with another chain")
		}
	})
}

// FuzzDecodeVideo: a video message is untrusted bytes — decodeVideo
// returns a message or an error, never panics, and what it decodes from
// a message appendVideo wrote is what was appended.
func FuzzDecodeVideo(f *testing.F) {
	f.Add(appendVideo(nil, 1_796_614_874_998_039_622, "d1", []byte{0, 0, 0, 1, 0x40, 1}, "h265"))
	f.Add(appendVideo(nil, 0, "", nil, ""))
	f.Add([]byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x10})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeVideo(b)
		if err != nil {
			return
		}
		again, err := decodeVideo(appendVideo(nil, v.Sec*1e9+int64(v.Nsec), v.FrameID, v.Data, v.Format))
		if err != nil || again.FrameID != v.FrameID || !bytes.Equal(again.Data, v.Data) || again.Format != v.Format {
			t.Fatalf("decoded %+v, appended and decoded again %+v (%v)", v, again, err)
		}
	})
}

func mustCert(tb testing.TB, rec []byte, pub ed25519.PublicKey) Certificate {
	rep, err := Verify(bytes.NewReader(rec), VerifyOptions{Trusted: []ed25519.PublicKey{pub}})
	if err != nil || rep.Err() != nil {
		tb.Fatalf("the seed record does not verify: %v %v", err, rep.Err())
	}
	return rep.Certificate
}

// TestVerifyDamaged damages a record in random ways (seeded: EDGE_SEED
// replays a run) and checks that Verify never panics, never takes long
// and never allocates much whatever the lengths in the file say: it found
// a panic (a chunk's compression-name length) and 4 GiB allocations (an
// attachment name's length) in the MCAP library's reader, which Verify
// now works around.
func TestVerifyDamaged(t *testing.T) {
	rec, _ := smallRecord(t)
	r := rand.New(rand.NewPCG(testkit.Seed(t), 0))
	for i := range 3000 {
		b := bytes.Clone(rec)
		for range 1 + r.IntN(4) {
			switch r.IntN(4) {
			case 0:
				b[r.IntN(len(b))] = byte(r.IntN(256))
			case 1: // a length field of 0x7fffffff or 2^64-1
				p := r.IntN(len(b) - 8)
				copy(b[p:], []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
				if r.IntN(2) == 0 {
					copy(b[p:], bytes.Repeat([]byte{0xff}, 8))
				}
			case 2:
				p := r.IntN(len(b))
				b = append(b[:p:p], b[p+r.IntN(len(b)-p):]...)
			case 3:
				p := r.IntN(len(b))
				ins := make([]byte, r.IntN(16))
				for k := range ins {
					ins[k] = byte(r.IntN(256))
				}
				b = append(b[:p:p], append(ins, b[p:]...)...)
			}
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		Verify(bytes.NewReader(b), VerifyOptions{})
		runtime.ReadMemStats(&m1)
		if a := m1.TotalAlloc - m0.TotalAlloc; a > 2*maxChunk {
			t.Fatalf("damage %d: Verify allocated %d MiB", i, a>>20)
		}
	}
}
