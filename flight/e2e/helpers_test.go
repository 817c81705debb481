package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/flight"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/flyrig"
	"github.com/edge-agent/edge-agent/localstream"
)

const (
	testDrone = flyrig.Drone
	testAgent = flyrig.Agent
)

// fly flies the test drone; the agent stops once the flight is complete
// at the centre, unless keepRunning.
func fly(t *testing.T, o flyrig.Options, keepRunning bool) *flyrig.Flown {
	t.Helper()
	var url string
	var nc *nats.Conn
	if !keepRunning {
		key := newKey(t)
		o.Landed = func() bool {
			if nc == nil {
				var err error
				if nc, err = nats.Connect(url); err != nil {
					return false
				}
				t.Cleanup(nc.Close)
			}
			return complete(nc, key)
		}
	}
	link := o.Link
	o.Link = func(addr string) string {
		url = "nats://" + addr
		if link != nil {
			return link(addr)
		}
		return addr
	}
	return flyrig.Fly(t, o)
}

// complete reports whether the drone's first flight is complete at the
// centre.
func complete(nc *nats.Conn, key ed25519.PrivateKey) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fl, err := flight.Find(ctx, nc, flight.FindOptions{Drone: testDrone})
	if err != nil || len(fl) == 0 {
		return false
	}
	res, err := flight.Export(ctx, nc, fl[0], flight.ExportOptions{FindOptions: flight.FindOptions{Drone: testDrone}, Key: key}, io.Discard)
	return err == nil && res.Certificate.Status == flight.StatusComplete
}

func connect(t *testing.T, url string) *nats.Conn { return connectTB(t, url) }

func connectTB(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newKey(t *testing.T) ed25519.PrivateKey { return newKeyTB(t) }

func newKeyTB(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// videoMessage is foxglove.CompressedVideo as a record writes it
// (protobuf), read by protobuf-go from the record's schema.
type videoMessage struct {
	m    *dynamicpb.Message
	Data []byte
}

var videoDescriptor = sync.OnceValues(func() (protoreflect.MessageDescriptor, error) {
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(flight.CompressedVideoSchema(), set); err != nil {
		return nil, err
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, err
	}
	d, err := files.FindDescriptorByName("foxglove.CompressedVideo")
	if err != nil {
		return nil, err
	}
	return d.(protoreflect.MessageDescriptor), nil
})

func decodeVideo(b []byte) (videoMessage, error) {
	md, err := videoDescriptor()
	if err != nil {
		return videoMessage{}, err
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, m); err != nil {
		return videoMessage{}, err
	}
	return videoMessage{m: m, Data: m.Get(md.Fields().ByName("data")).Bytes()}, nil
}

// encode writes the message back with Data (changed in place or not).
func (v videoMessage) encode() ([]byte, error) {
	v.m.Set(v.m.Descriptor().Fields().ByName("data"), protoreflect.ValueOfBytes(v.Data))
	return proto.Marshal(v.m)
}

// eventTime is the time a flight places a record by.
func eventTime(rec *localstream.Record) int64 {
	if rec.EventTime != 0 {
		return rec.EventTime
	}
	return rec.IngestTime
}

func waitTB(d time.Duration, cond func() bool) bool {
	return testkit.UntilEvery(d, 250*time.Millisecond, cond)
}

// checksAreCertificates checks the flight f, its two halves and a range
// from its middle to a minute after it in one CheckFlights pass, and
// each against its own export's certificate: the same status, reasons
// and stream reports. It returns the checks.
func checksAreCertificates(t *testing.T, nc *nats.Conn, key ed25519.PrivateKey, f flight.Flight) []flight.Check {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mid := f.StartNs + (f.EndNs-f.StartNs)/2
	half := func(from, to int64) flight.Flight {
		return flight.Flight{Drone: f.Drone, Agent: f.Agent, StartNs: from, EndNs: to, Rule: "range"}
	}
	fls := []flight.Flight{f, half(f.StartNs, mid), half(mid, f.EndNs), half(mid, f.EndNs+int64(time.Minute))}
	checks, err := flight.CheckFlights(ctx, nc, fls, flight.FindOptions{Drone: testDrone})
	if err != nil {
		t.Fatal(err)
	}
	for i, fl := range fls {
		res, err := flight.Export(ctx, nc, fl, flight.ExportOptions{FindOptions: flight.FindOptions{Drone: testDrone}, Key: key}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Certificate
		got, _ := json.Marshal(checks[i])
		want, _ := json.Marshal(flight.Check{Flight: fl, Status: c.Status, Reasons: c.Reasons, Streams: c.Streams})
		if string(got) != string(want) {
			t.Fatalf("flight %d of one pass:\n%s\nits export's certificate:\n%s", i, got, want)
		}
	}
	if checks[3].Status != flight.StatusIncomplete {
		t.Fatalf("a range a minute into the future is %s", checks[3].Status)
	}
	return checks
}
