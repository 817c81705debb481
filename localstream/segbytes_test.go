package localstream

import (
	"bytes"
	"context"
	"testing"
)

// TestSegmentBytesAfterReopen: a segment's Bytes over its Length is its
// events' mean payload after the store is reopened too, for payloads
// held inline and in payload files. Replication's backlog bytes are that
// mean times the events waiting (issue 40 item 5: an agent restarted
// during an outage showed a 4.3 MiB backlog of 195 video chunks of about
// 220 kB each, 43 MB: Bytes counted only what this run appended, over
// every event the segment holds).
func TestSegmentBytesAfterReopen(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{200, 3 * payloadThreshold} {
		dir := t.TempDir()
		s := openStore(t, dir, Options{})
		st := mustStream(t, s, "video", 1)
		appendN := func(st *Stream, n int) {
			for range n {
				if _, err := st.Append(ctx, Event{RoutingKey: "d1", Writer: "w", Payload: bytes.Repeat([]byte{'x'}, size)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		mean := func(st *Stream) float64 {
			var b, n uint64
			for _, seg := range st.Topology().Segments {
				b, n = b+seg.Bytes, n+seg.Length
			}
			return float64(b) / float64(n)
		}
		appendN(st, 50)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2 := openStore(t, dir, Options{})
		st2, err := s2.Stream("video")
		if err != nil {
			t.Fatal(err)
		}
		if m := mean(st2); m < 0.99*float64(size) || m > 1.01*float64(size) {
			t.Errorf("%d-byte events, reopened: a segment's mean %.0f bytes", size, m)
		}
		appendN(st2, 5)
		if m := mean(st2); m < 0.99*float64(size) || m > 1.01*float64(size) {
			t.Errorf("%d-byte events, reopened and 5 more appended: a segment's mean %.0f bytes", size, m)
		}
	}
}
