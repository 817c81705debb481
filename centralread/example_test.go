package centralread_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
)

// ReadAll reads what agents committed to one central stream, in commit
// order: the events, each with the committed watermark current at it,
// and the commit records. Here an embedded central is written by the
// replicator of one agent's local telemetry stream.
func ExampleReadAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, stop, err := exampleCentral(ctx, "ground-7", []string{"drone-1", "drone-2", "drone-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	items, err := centralread.ReadAll(ctx, nc, "telemetry", centralread.ReadOptions{Agent: "ground-7"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, it := range items {
		if it.Kind == centralread.ItemEvent {
			r := it.Event.Record
			fmt.Printf("%s %s %s\n", it.Agent, r.RoutingKey, r.Payload)
		}
	}
	// Output:
	// ground-7 drone-1 {"n":0}
	// ground-7 drone-2 {"n":1}
	// ground-7 drone-1 {"n":2}
}

// A CentralReader reads the same one item at a time, here one drone's
// events (RoutingKey) and the commit records, until io.EOF at the end of
// what the stream held when it started (Follow waits for more instead).
func ExampleCentralReader_Next() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, stop, err := exampleCentral(ctx, "ground-7", []string{"drone-1", "drone-2", "drone-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	r, err := centralread.NewCentralReader(ctx, nc, "telemetry", centralread.ReadOptions{RoutingKey: "drone-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	events, commits := 0, 0
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		switch it.Kind {
		case centralread.ItemEvent:
			events++
			fmt.Printf("%s %s\n", it.Event.Record.RoutingKey, it.Event.Record.Payload)
		case centralread.ItemCommit:
			commits++
		}
	}
	fmt.Println(events, "events, commit records:", commits > 0)
	// Output:
	// drone-1 {"n":0}
	// drone-1 {"n":2}
	// 2 events, commit records: true
}

// exampleCentral starts an embedded central and replicates a local
// telemetry stream of agent holding one event per drone to it; stop
// stops both and removes their files.
func exampleCentral(ctx context.Context, agent string, drones []string) (nc *nats.Conn, stop func(), err error) {
	dir, err := os.MkdirTemp("", "centralread-example-")
	if err != nil {
		return nil, nil, err
	}
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		os.RemoveAll(dir)
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	srv, err := central.New(central.Config{DataDir: dir + "/central", Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { srv.Close() })
	nc, err = replicate.Connect(replicate.ConnConfig{URLs: []string{srv.ClientURL()}, IgnoreDiscoveredServers: true,
		RequestTimeout: 5 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, nc.Close)
	s, err := localstream.Open(dir+"/store", localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { s.Close() })
	st, err := s.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		return nil, nil, err
	}
	for i, d := range drones {
		ev := localstream.Event{RoutingKey: d, Writer: "example/" + d, EventTime: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		if _, err := st.Append(ctx, ev); err != nil {
			return nil, nil, err
		}
	}
	sink, err := replicate.NewJetStreamSink(nc, agent, "example", replicate.JetStreamOptions{})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { sink.Close() })
	r := replicate.NewReplicator(st, sink, "example", replicate.ReplicatorConfig{Logger: slog.New(slog.DiscardHandler)})
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	stops = append(stops, func() { rcancel(); <-done })
	for r.Stats().Events < uint64(len(drones)) {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nc, stop, nil
}
