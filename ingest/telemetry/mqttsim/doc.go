// Package mqttsim simulates MQTT drones for tests, demos and load.
//
// Simulate publishes, per drone, JSON Telemetry (position on a circular
// flight path, attitude, speed, battery, `timestamp` in Unix ms and a
// per-drone `seq` from 1) to <prefix>/<drone>/telemetry at QoS 1, announces
// "online" (retained) on <prefix>/<drone>/status with a last will of
// "offline", and sends "offline" when done.
package mqttsim
