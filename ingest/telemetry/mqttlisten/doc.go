// Package mqttlisten is the agent's MQTT 3.1.1 server for publishers:
// drones connect to it and publish their telemetry with no broker in
// between. A Listener owns the protocol (CONNECT, keep-alive, QoS 0/1/2,
// wills, persistent sessions' dedup entries), its bounds (connections in
// all, per source address and before CONNECT; packet size; unread acks)
// and its counters (Stats); it delivers each message into a Pipeline —
// the telemetry Ingester — and sends a QoS 1/2 acknowledgement only when
// the pipeline calls the ack it delivered the message with, in the order
// the connection's PUBLISHes came. listener.go states the contract.
//
// Its tests speak MQTT on real sockets to a Listener with a recording
// Pipeline: the conversations in testdata/*.txt (TestScripts, commands
// listed in script_test.go) and a real paho client (paho_test.go).
package mqttlisten
