package flight

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/foxglove/mcap/go/mcap"
)

// TestRecordWriterError: an error of the MCAP writer's goroutine (here
// the file's: the disk fills) comes back from a later message and from
// close; abandoning the record after close does nothing more.
func TestRecordWriterError(t *testing.T) {
	out := newOutput(&failAfter{n: outputBuffer + 10})
	defer out.close()
	rw, err := newRecordWriter(out, mcap.CompressionLevelFastest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.channel("/raw/x", encRaw, "", ""); err != nil {
		t.Fatal(err)
	}
	src, p := rand.NewChaCha8([32]byte{39}), make([]byte, 1000)
	for i := 0; i < 50_000 && err == nil; i++ {
		src.Read(p) // incompressible: the chunks reach the file
		err = rw.message("/raw/x", uint32(i), int64(i), int64(i), p)
	}
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("messages after the failure returned %v", err)
	}
	if err := rw.close(map[string]string{}, []byte("{}"), 1); !errors.Is(err, errDiskFull) {
		t.Fatalf("close: %v", err)
	}
	rw.abandon()
}
