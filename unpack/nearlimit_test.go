package unpack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/wire"
)

// TestNearLimitEventsDoNotStall: events whose derived message comes to
// within a few dozen bytes of the server's max payload, on both sides of
// it: each is republished — whole when it fits with every header it is
// sent with (the fence), as an oversize marker when it does not — and
// the derived stream never stalls behind one.
func TestNearLimitEventsDoNotStall(t *testing.T) {
	const maxPayload = 64 << 10
	srv := rigs.StartCentral(t, central.Config{MaxPayload: maxPayload})
	nc := connect(t, srv.ClientURL())
	a := newTestAgent(t, "gs-1", 1)
	// The derived headers of an event like the ones appended below,
	// so that the payloads sweep the limit, 3 bytes apart.
	ev := localstream.Event{RoutingKey: "drone-0", Writer: "telemetry/drone-0", EventTime: a.base, IngestTime: time.Now().UnixNano(),
		ContentType: "application/json", Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/drone-0/telemetry"}}}
	tmpl := sourced{pos: position{seq: 10, index: 0}, ev: wire.CentralEvent{Stream: testStream, Agent: a.id, Txn: 10,
		Record: localstream.Record{Position: localstream.Position{Segment: 1<<32 | 1, Offset: 50}, Event: ev}}}
	m, _ := derivedMsg(Partition{Stream: testStream}, tmpl, wire.WatermarkJSON{LowerNs: a.base, UpperNs: a.base}, limit{})
	head := int(msgSize(m))
	const n = 100
	for i := range n {
		e := ev
		size := maxPayload - head - 250 + 3*i
		e.EventTime = a.base + int64(i)
		e.Payload = fmt.Appendf(nil, `{"drone":"drone-0","seq":%d,"pad":"%s"}`, i+1, strings.Repeat("x", size-40))
		e.Payload = e.Payload[:size-1]
		e.Payload = append(e.Payload, '}')
		pos, err := a.st.Append(context.Background(), e)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.tr.Note(e.Writer, e.EventTime, pos); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
	a.waitReplicated(t, r, 30*time.Second)
	src := waitSource(t, nc, testStream, n)
	u, _ := startUnpacker(t, nc, Options{RetryWait: 50 * time.Millisecond})
	if !testkit.Until(30*time.Second, func() bool { return derivedLast(nc, testStream) == n }) {
		t.Fatalf("the derived stream stalled at %d of %d events near the max payload %d; stats %+v", derivedLast(nc, testStream), n, maxPayload, u.Stats())
	}
	der, _ := derivedEvents(t, nc, testStream)
	var whole, markers int
	for i, d := range der {
		s := src[i]
		if d.Record.Position != s.Record.Position {
			t.Fatalf("derived %d at %v, source %v", i, d.Record.Position, s.Record.Position)
		}
		switch {
		case d.Dropped == "" && string(d.Record.Payload) == string(s.Record.Payload):
			whole++
		case strings.Contains(d.Dropped, "over the max payload") && markers == i-whole:
			markers++
		default:
			t.Fatalf("derived %d: dropped %q, %d bytes of %d (a whole event after a marker?)", i, d.Dropped, len(d.Record.Payload), len(s.Record.Payload))
		}
	}
	st := u.Stats()
	t.Logf("%d whole, %d oversize markers; stats %+v", whole, markers, st)
	if whole < 40 || markers < 20 || st.Oversize != uint64(markers) {
		t.Fatalf("the sweep missed the limit: %d whole, %d markers, stats %+v", whole, markers, st)
	}
}
