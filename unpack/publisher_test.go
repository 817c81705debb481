package unpack

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// TestPublisherFence: the publisher stores messages behind the expected
// sequence with one ack every few (the last asked at idle), reports
// them acked as derived sequences, and reports a refused expectation —
// another instance moved the stream — as ErrFenced at the next ack, not
// after its ack timeout, whether the refused message asked for the ack
// or was one of the unacked publishes before it: nothing after the
// other instance's messages is stored.
func TestPublisherFence(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FENCE", Subjects: []string{"fence.>"}})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(data string) *nats.Msg {
		return &nats.Msg{Subject: "fence.a", Header: nats.Header{}, Data: []byte(data)}
	}
	const ackTimeout = 5 * time.Second
	var mu sync.Mutex
	var acks []uint64
	p, err := newPublisher(nc, 0, 64, 1<<20, ackTimeout, func(seq uint64) {
		mu.Lock()
		defer mu.Unlock()
		acks = append(acks, seq)
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 305 {
		if err := p.add(ctx, msg("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.idle(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, ackTimeout, "the last ack", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acks) > 0 && acks[len(acks)-1] == 305
	})
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	// An ack every 12 messages (64 / 5), and the 305th at idle.
	if len(acks) != 300/12+1 || acks[0] != 12 || acks[len(acks)-1] != 305 {
		t.Fatalf("acks at %v, want every 12th and 305", acks)
	}

	for _, c := range []struct {
		name string
		// before is how many messages the publisher sends before the
		// other instance writes.
		before int
	}{
		{"the acked message refused", 0},
		{"an unacked message refused", 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			info, _ := st.Info(ctx)
			last := info.State.LastSeq
			p, err := newPublisher(nc, last, 1000, 1<<20, ackTimeout, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			// All but the last sent without an ack; the last is held.
			for range c.before {
				if err := p.add(ctx, msg("y")); err != nil {
					t.Fatal(err)
				}
			}
			nc.Flush()
			// Another instance writes two messages.
			for range 2 {
				if _, err := js.Publish(ctx, "fence.a", []byte("other")); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			// The held one goes out now, unacked; z at idle, acked.
			err = p.add(ctx, msg("z"))
			if err == nil {
				err = p.idle(ctx)
			}
			if err == nil {
				<-p.failedC()
				err = p.error()
			}
			if !errors.Is(err, ErrFenced) || time.Since(start) >= ackTimeout {
				t.Fatalf("a fenced publish: %v after %s", err, time.Since(start))
			}
			info, _ = st.Info(ctx)
			if want := last + uint64(max(c.before-1, 0)) + 2; info.State.LastSeq != want {
				t.Fatalf("last seq %d, want %d: a message behind the other instance's was stored", info.State.LastSeq, want)
			}
			t.Logf("fenced after %s: %v", time.Since(start).Round(time.Microsecond), err)
		})
	}
}
