package replay

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
)

// TestSendTlogTiming: a tlog sent over UDP at 10× its speed takes at
// least a tenth of its span, and every frame arrives as recorded, one a
// datagram, in order.
func TestSendTlogTiming(t *testing.T) {
	path := filepath.Join("..", "testdata", "mavlink", "flight.tlog")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	r := mavlink.NewTlogReader(bytes.NewReader(b), nil)
	for {
		e, err := r.Next()
		if err != nil {
			break
		}
		want = append(want, append([]byte(nil), e.Frame...))
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pc.SetReadBuffer(4 << 20)
	got := make(chan []byte, len(want)+1)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := pc.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- append([]byte(nil), buf[:n]...)
		}
	}()
	sum, err := SendTlog(context.Background(), path, "udp://"+pc.LocalAddr().String(), TlogOptions{Speed: 10})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Frames != len(want) || sum.Elapsed < sum.Span/10 {
		t.Fatalf("summary %s: want %d frames in at least %s", sum, len(want), sum.Span/10)
	}
	for i, w := range want {
		select {
		case g := <-got:
			if !bytes.Equal(g, w) {
				t.Fatalf("datagram %d: % x, want % x", i, g, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d frames arrived", i, len(want))
		}
	}
	if _, err := SendTlog(context.Background(), path, "http://x", TlogOptions{}); !errors.Is(err, ErrTarget) {
		t.Fatalf("bad target: %v", err)
	}
}
