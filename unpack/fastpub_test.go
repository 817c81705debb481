package unpack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// TestFastPublisherFence: the fast-batch sender (jetstreamext's
// FastPublisher) stores messages behind the expected sequence, acks them
// as derived sequences, and reports a refused expectation — another
// instance moved the stream — as ErrFenced at once, not after its ack
// timeout, with nothing stored.
func TestFastPublisherFence(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FENCE", Subjects: []string{"fence.>"}, AllowBatchPublish: true, AllowAtomicPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	const ackTimeout = 5 * time.Second
	var acked uint64
	p, err := newFastPublisher(js, 0, 64, 1<<20, ackTimeout, func(seq uint64) { acked = seq })
	if err != nil {
		t.Fatal(err)
	}
	for range 300 {
		if err := p.add(ctx, &nats.Msg{Subject: "fence.a", Header: nats.Header{}, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.idle(); err != nil || acked != 300 {
		t.Fatalf("after 300 messages and the batch's end: acked %d, %v", acked, err)
	}
	p.close()
	// Another instance moved the stream to 302; this one expects 300.
	for range 2 {
		if _, err := js.Publish(ctx, "fence.a", []byte("other")); err != nil {
			t.Fatal(err)
		}
	}
	p, err = newFastPublisher(js, 300, 64, 1<<20, ackTimeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	start := time.Now()
	err = p.add(ctx, &nats.Msg{Subject: "fence.a", Header: nats.Header{}, Data: []byte("y")})
	if err == nil {
		err = p.idle()
	}
	if !errors.Is(err, ErrFenced) || time.Since(start) >= ackTimeout {
		t.Fatalf("a fenced publish: %v after %s", err, time.Since(start))
	}
	info, _ := st.Info(ctx)
	if info.State.LastSeq != 302 {
		t.Fatalf("the fenced message was stored: last seq %d", info.State.LastSeq)
	}
	t.Logf("fenced after %s: %v", time.Since(start).Round(time.Microsecond), err)
}
