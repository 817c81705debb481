package live

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/localstream"
)

// leafPair is what a user picks instead of the agent: a NATS leaf node
// with its own JetStream domain on the ground station, whose streams the
// hub's streams source through the uplink (a linkProxy). Both are real
// nats-server instances (the library), as the peers harness runs them.
type leafPair struct {
	hub, leaf     *server.Server
	proxy         *linkProxy
	hubNC, leafNC *nats.Conn
	hubJS, leafJS jetstream.JetStream
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func runServer(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs, o.JetStream = "127.0.0.1", -1, true, true, true
	o.StoreDir = t.TempDir()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// newLeafPair starts the hub, the link (bytesPerSec) and the leaf, with an
// edge stream per kind (TEL: tel.>, VID: vid.>) each sourced by the hub.
func newLeafPair(t testing.TB, bytesPerSec int) *leafPair {
	t.Helper()
	p := &leafPair{}
	hubLeafPort := freePort(t)
	ho := &server.Options{ServerName: "hub", JetStreamDomain: "hub"}
	ho.LeafNode.Host, ho.LeafNode.Port, ho.LeafNode.NoAdvertise = "127.0.0.1", hubLeafPort, true
	p.hub = runServer(t, ho)
	p.proxy = newLinkProxy(t, fmt.Sprintf("127.0.0.1:%d", hubLeafPort), bytesPerSec)
	u, _ := url.Parse("nats-leaf://" + p.proxy.ln.Addr().String())
	lo := &server.Options{ServerName: "edge", JetStreamDomain: "edge"}
	lo.LeafNode.ReconnectInterval = 250 * time.Millisecond // as quick to return as the agent
	lo.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}, Compression: server.CompressionOpts{Mode: server.CompressionOff}}}
	p.leaf = runServer(t, lo)
	var err error
	if p.hubNC, err = nats.Connect(p.hub.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.hubNC.Close)
	if p.leafNC, err = nats.Connect(p.leaf.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.leafNC.Close)
	p.hubJS, _ = jetstream.New(p.hubNC)
	p.leafJS, _ = jetstream.New(p.leafNC, jetstream.WithPublishAsyncMaxPending(4096))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, k := range []string{"TEL", "VID"} {
		subj := map[string]string{"TEL": "tel.>", "VID": "vid.>"}[k]
		if _, err := p.leafJS.CreateStream(ctx, jetstream.StreamConfig{Name: k, Subjects: []string{subj}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.hubJS.CreateStream(ctx, jetstream.StreamConfig{Name: k + "_HUB", Storage: jetstream.FileStorage,
			Sources: []*jetstream.StreamSource{{Name: k, External: &jetstream.ExternalStream{APIPrefix: "$JS.edge.API"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// publish stores one of the fleet's events in the leaf's edge stream.
func (p *leafPair) publish(ctx context.Context, kind, drone string, ns int64, payload []byte) error {
	m := nats.NewMsg(kind + "." + drone)
	m.Header.Set("Edge-Event-Time", strconv.FormatInt(ns, 10))
	m.Data = payload
	_, err := p.leafJS.PublishMsgAsync(m)
	return err
}

// hubNewest is the event time of drone's newest telemetry at the hub (0: none).
func (p *leafPair) hubNewest(ctx context.Context, drone string) int64 {
	s, err := p.hubJS.Stream(ctx, "TEL_HUB")
	if err != nil {
		return 0
	}
	m, err := s.GetLastMsgForSubject(ctx, "tel."+drone)
	if err != nil {
		return 0
	}
	ns, _ := strconv.ParseInt(m.Header.Get("Edge-Event-Time"), 10, 64)
	return ns
}

// hubMsgs is how many messages the hub stream of kind holds.
func (p *leafPair) hubMsgs(ctx context.Context, kind string) uint64 {
	s, err := p.hubJS.Stream(ctx, kind+"_HUB")
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// emit is the leaf's emitter: telemetry on tel.<drone>, video on vid.<drone>.
func (p *leafPair) emit(ctx context.Context, stream string, ev localstream.Event) error {
	kind := map[string]string{"telemetry": "tel", "video": "vid"}[stream]
	return p.publish(ctx, kind, ev.RoutingKey, ev.EventTime, ev.Payload)
}
