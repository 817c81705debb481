package unpack

import (
	"context"
	"encoding/json"
	"errors"
	"flag"

	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/wire"
)

// update rewrites testdata/derived from the builder:
//
//	go test ./unpack -run TestDerivedGoldenVectors -update
var update = flag.Bool("update", false, "rewrite testdata/derived from the builder")

const goldenDir = "../testdata/derived"

// goldenVector is one derived message as a file: its subject, headers
// and payload, as the unpacker builds it (the sender's fence comes on
// top, see the header table).
type goldenVector struct {
	Subject string              `json:"subject"`
	Headers map[string][]string `json:"headers"`
	Payload []byte              `json:"payload"`
}

// goldenInputs are the source events of the vectors.
func goldenInputs() map[string]*nats.Msg {
	wm := wire.WatermarkJSON{LowerNs: 1_700_000_000_000_000_000, UpperNs: 1_700_000_000_500_000_000}
	out := map[string]*nats.Msg{}
	add := func(name string, s sourced, lim limit) {
		m, _ := derivedMsg(Partition{Stream: testStream}, s, wm, lim)
		out[name] = m
	}
	add("event", testEvent(), limit{})
	all := testEvent()
	all.ev.Record.Flags = localstream.FlagLate | localstream.FlagDiscontinuity | localstream.FlagKeyframe | localstream.FlagEstimatedTime |
		localstream.FlagGap | localstream.FlagRaw | localstream.FlagClockSkew
	all.ev.Record.Headers = append(all.ev.Record.Headers, localstream.Header{Key: "frame-pts", Value: "1,2,3"}, localstream.Header{Key: "a b", Value: "c&d"})
	add("event-every-flag-and-header", all, limit{})
	hashed := testEvent()
	hashed.ev.Record.RoutingKey = strings.Repeat("drone/", 40)
	add("event-hashed-key", hashed, limit{})
	marker := testEvent()
	marker.ev.Dropped = "ingest: queue full"
	marker.ev.Record.Payload = nil
	add("marker", marker, limit{})
	over := testEvent()
	over.ev.Record.Payload = make([]byte, 2000)
	add("marker-oversize", over, limit{max: 1500, reserve: fenceReserve})
	health := testEvent()
	health.ev.Stream, health.ev.Agent, health.ev.Record.RoutingKey = "health", "gs-1", "gs-1"
	m, _ := derivedMsg(Partition{Stream: "health"}, health, wm, limit{})
	out["event-agent-own"] = m
	out["marker-skipped"] = skipMarker(Partition{Stream: testStream}, 4711, "edge.telemetry.gs-9.cut", errors.New("wire: corrupt central record: pack version 3 (this reader knows 1 and 2)"))
	return out
}

// TestDerivedGoldenVectors: the builder writes each vector of
// testdata/derived exactly, and each decodes (unpack.Decode).
func TestDerivedGoldenVectors(t *testing.T) {
	for name, m := range goldenInputs() {
		got := goldenVector{Subject: m.Subject, Headers: m.Header, Payload: m.Data}
		b, _ := json.MarshalIndent(got, "", "  ")
		b = append(b, '\n')
		path := filepath.Join(goldenDir, name+".json")
		if *update {
			if err := os.MkdirAll(goldenDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != string(b) {
			t.Errorf("%s: the builder writes\n%s\nthe vector holds\n%s\n(run with -update if the change is meant)", name, b, want)
		}
		ev, err := Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if name == "event-agent-own" && (ev.Agent != "gs-1" || ev.Record.RoutingKey != "gs-1") {
			t.Errorf("%s decodes to agent %q, key %q", name, ev.Agent, ev.Record.RoutingKey)
		}
		for k := range m.Header {
			if !slices.Contains(headerTable(t), k) {
				t.Errorf("%s: header %s is not in the table of docs/central-format.md", name, k)
			}
		}
	}
}

// headerTable reads the header names of the derived-message table in
// docs/central-format.md (every `Name` in the first cell of its rows).
func headerTable(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/central-format.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "### Derived messages")
	if start < 0 {
		t.Fatal("docs/central-format.md has no 'Derived messages' section")
	}
	section := doc[start+3:]
	if end := strings.Index(section, "\n### "); end >= 0 {
		section = section[:end]
	}
	var names []string
	name := regexp.MustCompile("`([A-Za-z-]+)`")
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, m[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf("the derived-message table lists %d headers: %v", len(names), names)
	}
	return names
}

// TestStoredHeadersInTable: what a consumer reads from the derived
// stream carries only headers of the table (no fence, no reply or batch
// header of the publisher).
func TestStoredHeadersInTable(t *testing.T) {
	table := headerTable(t)
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	a := newTestAgent(t, "gs-1", 3)
	for range 20 {
		if err := a.appendRound(); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
	a.waitReplicated(t, r, 30*time.Second)
	// Acks every 4 messages: messages that asked for an ack and messages
	// that did not, both stored.
	startUnpacker(t, nc, Options{MaxPending: 20})
	testkit.WaitFor(t, 30*time.Second, "the events unpacked", func() bool { return derivedLast(nc, testStream) == 60 })
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), DerivedStreamName(testStream))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(context.Background(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for n := 0; n < 60; {
		b, err := cons.Fetch(60-n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			n++
			for k := range m.Headers() {
				seen[k] = true
			}
		}
		if b.Error() != nil {
			t.Fatal(b.Error())
		}
	}
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		if !slices.Contains(table, k) {
			t.Errorf("a stored derived message carries %s, not in the table", k)
		}
	}
	t.Logf("headers stored: %v", slices.Sorted(maps.Keys(seen)))
}
