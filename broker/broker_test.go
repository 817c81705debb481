package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

func connect(t *testing.T, url, id string, clean bool, onMsg paho.MessageHandler) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(clean).
		SetAutoReconnect(false).SetConnectRetry(false).SetDefaultPublishHandler(onMsg)
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	return c
}

// TestRestartKeepsQueuedMessages proves that the written configuration keeps
// a persistent session and its queued QoS 1 messages across a SIGTERM
// restart on the same port, and that more than mosquitto's default 1000
// queued messages are kept (max_queued_messages 0).
func TestRestartKeepsQueuedMessages(t *testing.T) {
	ctx := context.Background()
	b, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if b.Embedded() {
		t.Log("mosquitto binary absent: running against the embedded mochi-mqtt broker")
	}
	got := make(chan string, 4000)
	sub := connect(t, b.URL(), "sub-1", false, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	if tok := sub.Subscribe("t/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)

	const n = 1500
	pub := connect(t, b.URL(), "pub-1", true, nil)
	for i := 0; i < n; i++ {
		if tok := pub.Publish("t/x", 1, false, fmt.Sprint(i)); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	pub.Disconnect(100)
	port := b.Port()
	if b.Embedded() {
		t.Log("embedded broker: sessions do not survive Restart; restart not checked")
	} else if err := b.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	if b.Port() != port {
		t.Fatalf("port changed %d -> %d", port, b.Port())
	}
	sub = connect(t, b.URL(), "sub-1", false, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	defer sub.Disconnect(100)
	for i := 0; i < n; i++ {
		select {
		case p := <-got:
			if p != fmt.Sprint(i) {
				t.Fatalf("message %d: got %q", i, p)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d queued messages after restart; log: %s", i, n, b.LogTail(2000))
		}
	}
}

// TestHardRestartSamePort proves SIGKILL restart comes back on the same URL.
func TestHardRestartSamePort(t *testing.T) {
	ctx := context.Background()
	b, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	url := b.URL()
	if err := b.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if b.URL() != url || b.Restarts() != 1 {
		t.Fatalf("url %s -> %s, restarts %d", url, b.URL(), b.Restarts())
	}
	c := connect(t, b.URL(), "probe", true, nil)
	c.Disconnect(10)
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := b.Restart(ctx, false); err != ErrStopped {
		t.Fatalf("Restart after Stop: %v", err)
	}
}

// TestEmbeddedFallback proves the fallback broker carries QoS 1 messages.
func TestEmbeddedFallback(t *testing.T) {
	b, err := Start(context.Background(), Options{Embedded: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if !b.Embedded() {
		t.Fatal("Embedded() = false")
	}
	got := make(chan string, 1)
	sub := connect(t, b.URL(), "s", true, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	defer sub.Disconnect(10)
	if tok := sub.Subscribe("a/b", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	pub := connect(t, b.URL(), "p", true, nil)
	defer pub.Disconnect(10)
	pub.Publish("a/b", 1, false, "hi").Wait()
	select {
	case p := <-got:
		if p != "hi" {
			t.Fatalf("got %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message through the embedded broker")
	}
}
