// Command acklatency measures what a drone waits for its PUBACK: it
// publishes QoS 1 messages to an MQTT server (the agent's --mqtt-listen,
// or a broker in front of it) at a paced rate from a few clients and
// prints the publish → PUBACK latency percentiles. It is a benchmark tool
// (BENCHMARKS.md, "Sizing the scheduler"), not a test.
//
//	go run ./bench/acklatency -broker tcp://127.0.0.1:1883 -rate 5000 -duration 10s
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

func main() {
	broker := flag.String("broker", "tcp://127.0.0.1:1883", "MQTT server URL")
	rate := flag.Int("rate", 5000, "messages per second, all clients together")
	clients := flag.Int("clients", 4, "publishing clients (drones)")
	dur := flag.Duration("duration", 10*time.Second, "how long to publish")
	size := flag.Int("size", 200, "payload bytes")
	id := flag.String("id", "acklat", "client id prefix (also the topic's drone level)")
	flag.Parse()

	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	perClient := float64(*rate) / float64(*clients) // messages per second
	for c := range *clients {
		opts := mqtt.NewClientOptions().AddBroker(*broker).SetClientID(fmt.Sprintf("%s-%d", *id, c)).
			SetCleanSession(true).SetMaxResumePubInFlight(1000).SetAutoReconnect(false)
		cl := mqtt.NewClient(opts)
		if tok := cl.Connect(); tok.Wait() && tok.Error() != nil {
			fmt.Fprintln(os.Stderr, "connect:", tok.Error())
			os.Exit(1)
		}
		defer cl.Disconnect(100)
		topic := fmt.Sprintf("drones/%s-%d/telemetry", *id, c)
		payload := make([]byte, *size)
		wg.Go(func() {
			var waits sync.WaitGroup
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			begin, sent := time.Now(), 0
			for end := begin.Add(*dur); time.Now().Before(end); {
				<-t.C
				// What the rate owes by now: a late tick sends more.
				due := int(perClient * time.Since(begin).Seconds())
				for ; sent < due; sent++ {
					start := time.Now()
					tok := cl.Publish(topic, 1, false, payload)
					waits.Go(func() {
						tok.Wait()
						d := time.Since(start)
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					})
				}
			}
			waits.Wait()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("acks %d in %v: p50 %v p90 %v p99 %v p99.9 %v max %v\n", len(lat), *dur,
		pct(0.5).Round(time.Microsecond), pct(0.9).Round(time.Microsecond), pct(0.99).Round(time.Microsecond),
		pct(0.999).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
}
