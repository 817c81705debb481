// Package broker starts an MQTT broker for tests, benchmarks and the demo.
//
// It runs the real `mosquitto` binary (found in PATH or /usr/sbin) on a free
// 127.0.0.1 port with a configuration file it writes itself, and can restart
// it on the same port, keeping its persistence file, so that persistent
// sessions and queued QoS 1 messages survive the restart. Only when the
// binary is absent does it fall back to an embedded broker
// (github.com/mochi-mqtt/server/v2), and it says so through the logger and
// Broker.Embedded.
//
// The written configuration (see config.go) is the one docs/telemetry.md
// recommends for the agent:
//
//	listener <port> 127.0.0.1
//	allow_anonymous true
//	user root                    # only when run as root: keeps write access to <dir>
//	persistence true
//	persistence_location <dir>/data/
//	autosave_interval <n>
//	max_queued_messages 0        # 0 = no limit (the default 1000 silently drops QoS 1)
//	max_queued_bytes 0
//	max_inflight_messages <n>    # unacked QoS 1 messages in flight per client
//	log_dest file <dir>/mosquitto.log
//
// Mosquitto writes its persistence file on a clean shutdown (SIGTERM) and
// every autosave interval, not per message: a SIGKILL of the broker loses
// what arrived since the last save. Restart(ctx, false) therefore stops with
// SIGTERM; Restart(ctx, true) kills with SIGKILL for tests of that case.
package broker
