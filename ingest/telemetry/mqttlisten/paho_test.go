package mqttlisten

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestPahoPublishAckedAfterDeliver: a real paho client's QoS 1 publishes
// complete only once the pipeline acks them, and the first one held back
// holds back the later ones (PUBACKs in the order the PUBLISHes came),
// whatever order the pipeline acks in.
func TestPahoPublishAckedAfterDeliver(t *testing.T) {
	h := &harness{t: t, dir: t.TempDir(), clients: map[string]*client{}}
	t.Cleanup(h.stopListener)
	h.listen(Config{
		Addr: "127.0.0.1:0", MaxConnections: 4, MaxConnectionsPerSource: 4, MaxUnconnected: 4,
		ConnectTimeout: 5 * time.Second, MaxKeepAlive: time.Minute, MaxPayload: 1024,
	})
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + h.l.Addr().String()).
		SetClientID("paho-drone").SetCleanSession(false).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	const n = 5
	toks := make([]paho.Token, n)
	for i := range toks {
		toks[i] = c.Publish("drones/p/telemetry", 1, false, fmt.Sprintf(`{"seq":%d}`, i+1))
	}
	testkit.WaitFor(t, 5*time.Second, "5 deliveries", func() bool { return h.p.delivery(n) != nil })
	done := func() (k int) {
		for _, tok := range toks {
			select {
			case <-tok.Done():
				k++
			default:
			}
		}
		return k
	}
	// Acked by the pipeline from the last to the second: nothing completes.
	for i := n; i >= 2; i-- {
		h.p.delivery(i).ack()
	}
	if toks[n-1].WaitTimeout(200*time.Millisecond) || done() != 0 {
		t.Fatalf("%d publishes completed before the first was acked", done())
	}
	h.p.delivery(1).ack()
	for i, tok := range toks {
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d not completed after every ack: %v", i+1, tok.Error())
		}
	}
	for i := 1; i <= n; i++ {
		d := h.p.delivery(i)
		if want := fmt.Sprintf(`{"seq":%d}`, i); string(d.m.Payload()) != want || !d.dedup {
			t.Fatalf("delivery %d: %q dedup %t, want %s with the session's dedup entry", i, d.m.Payload(), d.dedup, want)
		}
	}
}
