// Package demo runs the whole pipeline in one process on embedded
// defaults — a central JetStream server, an MQTT broker (the local
// mosquitto binary when present, else an embedded broker), the agent,
// simulated telemetry drones, the test video capture replayed as live
// drones and simulated MAVLink autopilots — shows live progress, and ends
// with a verification read back from the central store: events in vs
// events at the centre, duplicates, per-drone order, the MAVLink frames
// byte for byte as sent, the watermark rule, and a playable exported clip.
//
// It backs `edge-agent demo` and its end-to-end test.
package demo
