package flight

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestOutput: what goes through output arrives in order and whole (small
// writes gathered, large ones split across buffers), its SHA-256 and
// size are those of the bytes.
func TestOutput(t *testing.T) {
	seed := testkit.Seed(t)
	r := rand.New(rand.NewPCG(seed, 0))
	src := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	var want, got bytes.Buffer
	o := newOutput(&got)
	for range 200 {
		p := make([]byte, []int{1, 9, 100, 4000, outputBuffer - 1, outputBuffer + 7, 3 * outputBuffer}[r.IntN(7)])
		src.Read(p)
		want.Write(p)
		if n, err := o.Write(p); n != len(p) || err != nil {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	if err := o.close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("%d bytes arrived of %d, or in another order", got.Len(), want.Len())
	}
	if sum := sha256.Sum256(want.Bytes()); !bytes.Equal(o.h.Sum(nil), sum[:]) || o.n != int64(want.Len()) {
		t.Fatalf("hash or size (%d) not the bytes'", o.n)
	}
}

// failAfter accepts n bytes, then fails every write.
type failAfter struct{ n int }

var errDiskFull = errors.New("disk full")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n := f.n
		f.n = 0
		return n, errDiskFull
	}
	f.n -= len(p)
	return len(p), nil
}

// TestOutputError: the writer's error comes back from a later Write and
// from close, and close returns (the goroutine ended).
func TestOutputError(t *testing.T) {
	o := newOutput(&failAfter{n: outputBuffer + 10})
	p := make([]byte, 1000)
	var err error
	for i := 0; i < 10*outputBuffer/len(p) && err == nil; i++ {
		_, err = o.Write(p)
	}
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("writes after the failure returned %v", err)
	}
	if err := o.close(); !errors.Is(err, errDiskFull) {
		t.Fatalf("close: %v", err)
	}
	if err := o.close(); !errors.Is(err, errDiskFull) {
		t.Fatalf("close again: %v", err)
	}
}
