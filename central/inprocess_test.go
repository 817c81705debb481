package central_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestInProcessConn: a client on nats.InProcessServer(server) publishes
// without waiting (the write buffer in front of the pipe), and every
// message reaches the stream in order, those published just before Close
// included; after a Restart the client reconnects in process and
// publishes on.
func TestInProcessConn(t *testing.T) {
	s, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect("", nats.InProcessServer(s), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for i := range n {
		if err := nc.Publish("t.a", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Close right away: what is buffered still reaches the server.
	nc.Close()
	check := func(want uint64) {
		t.Helper()
		testkit.WaitFor(t, time.Minute, fmt.Sprintf("%d messages in the stream", want), func() bool {
			info, err := st.Info(ctx)
			return err == nil && info.State.Msgs == want
		})
		for _, seq := range []uint64{1, want / 2, want} {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			if got, w := string(m.Data), fmt.Sprint(seq-1); seq <= n && got != w {
				t.Fatalf("seq %d holds %q, want %q (out of order)", seq, got, w)
			}
		}
	}
	nc, err = nats.Connect("", nats.InProcessServer(s), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	if st, err = js.Stream(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	check(n)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// The client reconnects through the provider to the new node.
	testkit.WaitFor(t, time.Minute, "a publish after the restart", func() bool {
		_, err := js.Publish(ctx, "t.a", []byte("after"), jetstream.WithMsgID("after"))
		return err == nil
	})
	if st, err = js.Stream(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	check(n + 1)
	if nc.Stats().Reconnects == 0 {
		t.Fatal("the client did not reconnect")
	}
}
