// Package telemetry captures drone telemetry from an MQTT broker, or from
// drones publishing straight to its own MQTT 3.1.1 listener, into the local
// `telemetry` stream. (Simulated drones for tests, demos and load are
// package mqttsim.)
//
// # Data path
//
//	broker ──► brokerConn (paho's reading goroutine, in order) ─┐
//	drones ──► mqttlisten (a goroutine per connection) ────────┤ deliver, one at a time (deliverMu)
//	             │ status? unknown topic? retained (broker)? too big? → ack, count
//	             │ new drone, every slot held? → refuse, count (never waits;
//	             │   from the broker: a gap marker, acked once durable)
//	             ▼
//	           lane per drone (bounded FIFO, Config.LaneDepth)
//	             │ dispatcher: round-robin over lanes, ≤32 items per lane per round
//	             │ DUP + packet id + hash known? → ack (after the original is durable)
//	             ▼
//	           Stream.AppendAsync(event, WithMeta(dedup entry))   (one goroutine: store order = delivery order)
//	             │ callback after the fsync'd group commit, in append order
//	             ▼
//	           Marks.Note(writer, event time, position) → PUBACK, in each
//	           connection's delivery order (mqttwire.AckOrder), from one acker goroutine
//
// The listener is its own package, mqttlisten (protocol, bounds, its
// counters), delivering through mqttlisten.Pipeline (listen.go); what it
// shares with the broker client is in internal/mqttwire (connection,
// packet reader, PUBACK, ack order) and internal/dedup (dedup entries).
// docs/telemetry.md documents it and why it is hand-written.
//
// The client uses a persistent session (clean session off, stable client id
// from the agent id), QoS 1 subscriptions renewed on every connect, manual
// acks and paho's reconnect with a capped exponential backoff. A PUBACK is
// sent only after the event is durable (rule 1). Subscribed() is closed
// after the first subscription: on a very first start the broker keeps
// nothing for the agent before that, so "ready" means subscribed. An ack made on a connection
// that has since dropped is lost; the broker then redelivers with DUP set.
//
// # No duplicates after a crash
//
// Each append writes, in the same Badger transaction, a dedup entry:
//
//	key   "mqtt/<client id>/<packet id>"
//	value [1 byte version = 1][16 bytes sha256(topic 0x00 payload)]
//
// A delivery with DUP set whose packet id and hash match the entry is a
// redelivery of a message already stored: it is acked and counted
// (Stats.DuplicatesSkipped), not appended. If the original is still in the
// store's queue, the redelivery's ack waits until it is durable. The entries
// are read back at start. Residual risk, documented: a DUP delivery whose
// topic and payload are byte-identical to the last message stored under the
// same packet id is taken for a redelivery; telemetry carrying a sequence
// number or timestamp never is.
//
// # Events
//
// Routing key = drone id (from the {drone} level of the topic pattern, or
// its single + level),
// writer "telemetry/<drone>", header "mqtt-topic". JSON payloads are stored
// as application/json with the event time from Config.TimeField (Unix s, ms,
// µs, ns — by magnitude or configured — or an RFC 3339 string); without a
// usable time field the receive time is used with FlagEstimatedTime.
// Non-JSON payloads are stored as received with Config.BinaryContentType and
// FlagRaw|FlagEstimatedTime.
//
// # Policies (all counted in Stats)
//
//   - payload > MaxPayload: dropped and acked (Oversize);
//   - topic on no pattern: dropped and acked (UnknownTopic);
//   - retained telemetry replayed on (re)subscribe: acked, not stored (RetainedSkipped);
//   - truncated / invalid JSON: stored raw (InvalidJSON); other binary: stored raw (Binary);
//   - JSON time field of the wrong type or out of range: stored, estimated time (TimeInvalid);
//   - status "offline" (or the last will): the drone's writer is closed once
//     its earlier events are durable; "online" cancels a close still waiting;
//   - a new drone while MaxDrones drones hold a slot: refused at once, no
//     delivery waits (DronesOverLimit, Problems): no PUBACK on the
//     listener, dropped from the broker, written as a gap marker and acked
//     once the marker is durable (refused.go; RefusedMarkers);
//   - retained status replayed by the broker: acked, skipped (RetainedSkipped);
//     status messages never take a slot;
//   - a full lane makes delivery wait (LaneFullWaits): keep LaneDepth ≥ the
//     broker's max_inflight_messages;
//   - a store append error stops Run with ErrStore (restart: nothing acked is lost).
package telemetry
