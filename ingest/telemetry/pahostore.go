package telemetry

import "github.com/eclipse/paho.mqtt.golang/packets"

// noStore is the broker client's paho Store: it keeps nothing. paho's
// default memory store keeps every QoS 1 PUBLISH received until its
// PUBACK, under a key formatted per message, to resume it after a
// reconnect; here the broker does that (clean session off: what was not
// acknowledged is delivered again) and the dedup entries, not paho, say
// what is stored. The agent publishes nothing and subscribes again on
// every connect (onConnect), so no outbound packet needs resuming either.
type noStore struct{}

func (noStore) Open()                             {}
func (noStore) Put(string, packets.ControlPacket) {}
func (noStore) Get(string) packets.ControlPacket  { return nil }
func (noStore) All() []string                     { return nil }
func (noStore) Del(string)                        {}
func (noStore) Close()                            {}
func (noStore) Reset()                            {}
