package telemetry

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors returns Prometheus counters reading the ingester's live
// counters (edge_telemetry_*_total), for the agent's /metrics.
func (in *Ingester) Collectors() []prometheus.Collector {
	c := &in.c
	defs := []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"received", "MQTT messages delivered by the broker.", &c.received},
		{"appended", "Telemetry events durable in the store (each acked after).", &c.appended},
		{"duplicates_skipped", "Redeliveries acked without storing them again.", &c.duplicates},
		{"oversize", "Messages above the maximum payload: dropped and acked.", &c.oversize},
		{"unknown_topic", "Messages on no configured topic pattern: dropped and acked.", &c.unknownTopic},
		{"retained_skipped", "Retained telemetry replayed on subscribe: acked, not stored.", &c.retained},
		{"invalid_json", "Payloads starting like JSON that do not parse: stored raw.", &c.invalidJSON},
		{"binary", "Non-JSON payloads: stored raw.", &c.binary},
		{"time_estimated", "Events stamped with the receive time.", &c.timeEstimated},
		{"time_invalid", "JSON time fields present but unusable.", &c.timeInvalid},
		{"late", "Events flagged late.", &c.late},
		{"clock_skew", "Events whose time is outside the receiving clock's bounds (flagged clock-skew).", &c.clockSkew},
		{"status_online", "Online status messages.", &c.statusOnline},
		{"status_offline", "Offline status messages (incl. last wills).", &c.statusOffline},
		{"status_unknown", "Status messages with an unknown payload.", &c.statusUnknown},
		{"writers_closed", "Writers closed after an offline status.", &c.writersClosed},
		{"drones_over_limit", "Messages of new drones refused while every slot was held: held unacknowledged until a slot freed.", &c.dronesOverLimit},
		{"drones_released", "Drone slots given back (offline or idle) to let a new drone in.", &c.dronesReleased},
		{"drone_ids_mapped", "Messages whose topic level was not a valid drone id and was mapped.", &c.droneIDsMapped},
		{"lane_full_waits", "Deliveries that waited for a full drone lane.", &c.laneFullWaits},
		{"connects", "Broker connections established.", &c.connects},
		{"connection_lost", "Broker connections lost.", &c.connectionLost},
		{"subscribe_errors", "Failed (re)subscriptions.", &c.subscribeErrors},
		{"mark_errors", "Watermark notes or closes that failed.", &c.markErrors},
	}
	out := make([]prometheus.Collector, 0, len(defs))
	for _, d := range defs {
		v := d.v
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "edge", Subsystem: "telemetry", Name: d.name + "_total", Help: d.help,
		}, func() float64 { return float64(v.Load()) }))
	}
	return out
}
