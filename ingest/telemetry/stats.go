package telemetry

import "sync/atomic"

// Stats is a snapshot of the ingester's counters (all since New).
type Stats struct {
	// Received: messages delivered by the broker (including duplicates and drops).
	Received uint64 `json:"received"`
	// Appended: events durable in the store (each acked after).
	Appended uint64 `json:"appended"`
	// DuplicatesSkipped: redeliveries (DUP, same packet id and hash) acked without an append.
	DuplicatesSkipped uint64 `json:"duplicates_skipped"`
	// Redelivered: redeliveries (DUP) that no dedup entry matched, stored
	// with header HeaderRedelivered. Each is the first stored copy of its
	// message (the agent stopped before its append was durable) or, when
	// the store that held the entry was lost (data directory removed or
	// replaced), a repeat of an event the centre may have: only messages
	// never acknowledged to their sender, marked; the replicator does not
	// send one whose first copy is at the centre (Repeat).
	Redelivered uint64 `json:"redelivered"`
	// Oversize: payloads above MaxPayload (or the store's event limit): dropped and acked.
	Oversize uint64 `json:"oversize"`
	// BrokerOversizeSkipped: PUBLISHes from the broker above MaxPayload +
	// 64 KiB, skipped as they arrived without being held in memory,
	// dropped and acked (counted in Oversize too).
	BrokerOversizeSkipped uint64 `json:"broker_oversize_skipped"`
	// BrokerTooLarge: broker connections closed for a packet other than
	// a QoS 0/1 PUBLISH above MaxPayload + 64 KiB (a broken broker), before
	// it was read.
	BrokerTooLarge uint64 `json:"broker_too_large"`
	// UnknownTopic: messages on no configured pattern: dropped and acked.
	UnknownTopic uint64 `json:"unknown_topic"`
	// RetainedSkipped: retained telemetry and status replayed by the broker on (re)subscribe: acked, not stored.
	RetainedSkipped uint64 `json:"retained_skipped"`
	// InvalidJSON: payloads that start like JSON but do not parse: stored raw.
	InvalidJSON uint64 `json:"invalid_json"`
	// Binary: other non-JSON payloads: stored raw.
	Binary uint64 `json:"binary"`
	// TimeEstimated: events stamped with the receive time (flag estimated).
	TimeEstimated uint64 `json:"time_estimated"`
	// TimeInvalid: JSON payloads whose time field exists but is unusable (subset of TimeEstimated).
	TimeInvalid uint64 `json:"time_invalid"`
	// Late: events flagged late by the watermark marks.
	Late uint64 `json:"late"`
	// ClockSkew: events whose time is outside the receiving clock's bounds
	// (flagged clock-skew; per drone in the watermark's counters).
	ClockSkew uint64 `json:"clock_skew"`
	// StatusOnline, StatusOffline, StatusUnknown: status messages by payload.
	StatusOnline  uint64 `json:"status_online"`
	StatusOffline uint64 `json:"status_offline"`
	StatusUnknown uint64 `json:"status_unknown"`
	// WritersClosed: writers closed after an offline status.
	WritersClosed uint64 `json:"writers_closed"`
	// DronesOverLimit: messages of new drones refused, at once, while
	// MaxDrones drones held a slot: on the listener not acknowledged (the
	// publisher resends), from the broker acknowledged and dropped,
	// written as gap markers (RefusedMarkers).
	DronesOverLimit uint64 `json:"drones_over_limit"`
	// RefusedMarkers: gap markers written for the broker's refused
	// messages (refused.go; writer RefusedWriter).
	RefusedMarkers uint64 `json:"refused_markers"`
	// DronesReleased: slots given back (drone offline, or silent for
	// DroneIdleTimeout) to let a new drone in.
	DronesReleased uint64 `json:"drones_released"`
	// DroneIDsMapped: messages whose topic level was not a valid drone id
	// (too long, control characters, invalid UTF-8) and was mapped (DroneID).
	DroneIDsMapped uint64 `json:"drone_ids_mapped"`
	// LaneFullWaits: deliveries that waited for a full drone lane.
	LaneFullWaits uint64 `json:"lane_full_waits"`
	// BudgetWaits: messages that waited for room in MaxBufferedBytes
	// before delivery (their connection not read meanwhile).
	BudgetWaits uint64 `json:"budget_waits"`
	// BufferedBytes: the bytes of telemetry buffered now, between the
	// connections and the durable store (at most MaxBufferedBytes, or one
	// message).
	BufferedBytes int64 `json:"buffered_bytes"`
	// Connects and ConnectionLost count broker connections made and lost.
	Connects       uint64 `json:"connects"`
	ConnectionLost uint64 `json:"connection_lost"`
	// SubscribeErrors: failed (re)subscriptions.
	SubscribeErrors uint64 `json:"subscribe_errors"`
	// MarkErrors: watermark notes that failed.
	MarkErrors uint64 `json:"mark_errors"`
	// DedupLoaded: packet ids whose newest dedup entry was read back at
	// start (broker client); DedupCorrupt: records or values among them
	// that did not decode (they catch no redelivery).
	DedupLoaded  uint64 `json:"dedup_loaded"`
	DedupCorrupt uint64 `json:"dedup_corrupt"`
	// DedupCollected: dedup journal entries (and keys of the layout before
	// it) deleted because every record in them has a newer one for its
	// packet id; DedupErrors: collections that failed to read or delete
	// (retried at the next one).
	DedupCollected uint64 `json:"dedup_collected"`
	DedupErrors    uint64 `json:"dedup_errors"`
	// DiskFullWaits: messages held unacknowledged while the store refused
	// appends for lack of disk space (retried until space returns).
	DiskFullWaits uint64 `json:"disk_full_waits"`

	// The listener (Config.Listen); all zero without it.
	//
	// ListenerConnections: connections open now.
	ListenerConnections int64 `json:"listener_connections"`
	// ListenerAccepted: connections accepted (within MaxConnections).
	ListenerAccepted uint64 `json:"listener_accepted"`
	// ListenerRefused: connections closed at once, MaxConnections being open.
	ListenerRefused uint64 `json:"listener_refused"`
	// ListenerSourceRefused: connections closed at once, their source
	// address holding MaxConnectionsPerSource.
	ListenerSourceRefused uint64 `json:"listener_source_refused"`
	// ListenerUnconnectedEvicted: connections without a CONNECT closed to
	// make room for a newer one (MaxUnconnected were waiting).
	ListenerUnconnectedEvicted uint64 `json:"listener_unconnected_evicted"`
	// ListenerConnects: CONNECTs accepted (CONNACK 0).
	ListenerConnects uint64 `json:"listener_connects"`
	// ListenerConnectRefused: CONNECTs refused with a CONNACK code (bad
	// protocol level, client id empty with clean session off or over 256 bytes).
	ListenerConnectRefused uint64 `json:"listener_connect_refused"`
	// ListenerConnectTimeouts: connections closed without a CONNECT within ConnectTimeout.
	ListenerConnectTimeouts uint64 `json:"listener_connect_timeouts"`
	// ListenerKeepAliveTimeouts: clients silent for 1.5 × their keep-alive, disconnected.
	ListenerKeepAliveTimeouts uint64 `json:"listener_keep_alive_timeouts"`
	// ListenerProtocolErrors: connections closed for bytes that are not MQTT 3.1.1.
	ListenerProtocolErrors uint64 `json:"listener_protocol_errors"`
	// ListenerTooLarge: connections closed for a packet above MaxPayload +
	// 64 KiB (refused before it was read).
	ListenerTooLarge uint64 `json:"listener_too_large"`
	// ListenerSlowReaders: connections closed because the client did not
	// read its acks (1 MiB unread).
	ListenerSlowReaders uint64 `json:"listener_slow_readers"`
	// ListenerDisconnects: connections ended by the client's DISCONNECT.
	ListenerDisconnects uint64 `json:"listener_disconnects"`
	// ListenerLost: connections that ended without DISCONNECT (closed, reset).
	ListenerLost uint64 `json:"listener_lost"`
	// ListenerTakeovers: connections replaced by a newer one of the same client id.
	ListenerTakeovers uint64 `json:"listener_takeovers"`
	// ListenerWills: last wills delivered (a connection ended without DISCONNECT).
	ListenerWills uint64 `json:"listener_wills"`
	// ListenerSubscribeRefused: SUBSCRIBEs answered with failure (the agent is not a broker).
	ListenerSubscribeRefused uint64 `json:"listener_subscribe_refused"`
	// ListenerQoS2: QoS 2 messages received (PUBREC after the durable append).
	ListenerQoS2 uint64 `json:"listener_qos2"`
	// ListenerDedupErrors: dedup entries that could not be read (the
	// message was stored: at worst a duplicate).
	ListenerDedupErrors uint64 `json:"listener_dedup_errors"`
	// ListenerDedupCollected: dedup journal entries deleted because every
	// record in them has a newer one for its packet id.
	ListenerDedupCollected uint64 `json:"listener_dedup_collected"`
}

// counters are the live atomic counters behind Stats.
type counters struct {
	received, appended, duplicates, oversize, unknownTopic, retained atomic.Uint64
	invalidJSON, binary, timeEstimated, timeInvalid, late            atomic.Uint64
	statusOnline, statusOffline, statusUnknown, writersClosed        atomic.Uint64
	dronesOverLimit, laneFullWaits, connects, connectionLost         atomic.Uint64
	subscribeErrors, markErrors, dedupLoaded, dedupCorrupt           atomic.Uint64
	diskFullWaits, clockSkew, dronesReleased, droneIDsMapped         atomic.Uint64
	dedupCollected, dedupErrors, budgetWaits, redelivered            atomic.Uint64
	brokerSkipped, brokerTooLarge                                    atomic.Uint64
}

// Stats returns a snapshot of the counters. Safe for concurrent use.
func (in *Ingester) Stats() Stats {
	c := &in.c
	st := Stats{
		Received: c.received.Load(), Appended: c.appended.Load(), DuplicatesSkipped: c.duplicates.Load(),
		Oversize: c.oversize.Load(), BrokerOversizeSkipped: c.brokerSkipped.Load(), BrokerTooLarge: c.brokerTooLarge.Load(), UnknownTopic: c.unknownTopic.Load(), RetainedSkipped: c.retained.Load(),
		InvalidJSON: c.invalidJSON.Load(), Binary: c.binary.Load(), TimeEstimated: c.timeEstimated.Load(),
		TimeInvalid: c.timeInvalid.Load(), Late: c.late.Load(), ClockSkew: c.clockSkew.Load(),
		StatusOnline: c.statusOnline.Load(), StatusOffline: c.statusOffline.Load(), StatusUnknown: c.statusUnknown.Load(),
		WritersClosed: c.writersClosed.Load(), DronesOverLimit: c.dronesOverLimit.Load(), RefusedMarkers: in.refusals.markers.Load(),
		LaneFullWaits: c.laneFullWaits.Load(), Connects: c.connects.Load(), ConnectionLost: c.connectionLost.Load(),
		SubscribeErrors: c.subscribeErrors.Load(), MarkErrors: c.markErrors.Load(),
		DedupLoaded: c.dedupLoaded.Load(), DedupCorrupt: c.dedupCorrupt.Load(),
		DedupCollected: c.dedupCollected.Load(), DedupErrors: c.dedupErrors.Load(),
		DiskFullWaits: c.diskFullWaits.Load(), DronesReleased: c.dronesReleased.Load(),
		DroneIDsMapped: c.droneIDsMapped.Load(), BudgetWaits: c.budgetWaits.Load(), BufferedBytes: in.budget.held.Load(),
		Redelivered: c.redelivered.Load(),
	}
	if in.listener != nil {
		l := in.listener.Stats()
		st.ListenerConnections, st.ListenerAccepted, st.ListenerRefused = l.Connections, l.Accepted, l.Refused
		st.ListenerSourceRefused, st.ListenerUnconnectedEvicted = l.SourceRefused, l.UnconnectedEvicted
		st.ListenerConnects, st.ListenerConnectRefused, st.ListenerConnectTimeouts = l.Connects, l.ConnectRefused, l.ConnectTimeouts
		st.ListenerKeepAliveTimeouts, st.ListenerProtocolErrors, st.ListenerTooLarge = l.KeepAliveTimeouts, l.ProtocolErrors, l.TooLarge
		st.ListenerSlowReaders, st.ListenerDisconnects, st.ListenerLost = l.SlowReaders, l.Disconnects, l.Lost
		st.ListenerTakeovers, st.ListenerWills, st.ListenerSubscribeRefused = l.Takeovers, l.Wills, l.SubscribeRefused
		st.ListenerQoS2, st.ListenerDedupErrors, st.ListenerDedupCollected = l.QoS2, l.DedupErrors, l.DedupCollected
	}
	return st
}
