// Package devices owns what the agent knows about the things around it:
// the drones it sees (Registry), the ground station's own health
// (Sampler, into the health stream) and the disk it writes to (Pressure:
// early retention and the shedding policy).
//
// # Registry
//
// A drone is registered the first time any source sees it (Seen) or says
// something about it (SetOnline). It is online while it is active; it goes
// offline explicitly (a status message or MQTT last will: SetOnline false,
// reason "explicit") or by silence (nothing seen for OfflineAfter at the
// injected clock: reason "silence"), and comes back with its next activity.
// Each transition calls OnOnline / OnOffline once. Observe / ObserveAsync
// wrap a stream's append so that every durable append counts as activity
// and every refused one as a drop; ObserveOffline wraps the telemetry
// ingest's watermark marks so that its offline close marks the drone
// offline.
//
// # Health sample (health stream, content type application/json), version 1
//
//	{
//	  "v": 1, "agent": "gs-1", "time": "2026-11-29T12:00:00Z", "time_ns": 1795953600000000000,
//	  "cpu": {"percent": 12.5, "count": 4},          // percent over the last interval (since boot for the first sample)
//	  "mem": {"total": .., "available": .., "used": .., "used_percent": ..},
//	  "swap": {"total": .., "used": .., "used_percent": ..},
//	  "load": {"load1": .., "load5": .., "load15": ..},
//	  "disk": {"path": "/var/lib/edge-agent", "total": .., "free": .., "used": .., "used_percent": ..,
//	           "inodes_total": .., "inodes_free": ..},
//	  "net": [{"name": "eth0", "bytes_sent": .., "bytes_recv": .., "packets_sent": .., "packets_recv": ..,
//	           "errin": .., "errout": .., "dropin": .., "dropout": ..}],     // cumulative counters
//	  "temperatures": [{"sensor": "coretemp_core_0", "celsius": 47.0}],      // absent when the host has none
//	  "uptime_s": .., "errors": ["..."]                                      // probes that failed, if any
//	}
//
// Event: routing key = agent id, writer "health/<agent>", event time = the
// sample time, then a watermark mark at the durable position. DecodeSample
// reads it back (and refuses other versions).
//
// # Disk pressure
//
// Free space of the data directory's filesystem is compared with two
// thresholds (bytes or percent of the filesystem): below RetainBelow every
// stream is truncated to its committed cut (replicated data is deleted
// early; nothing is lost); below ShedBelow, in addition, the streams the
// policy allows to lose unreplicated data are shed oldest first, in policy
// order, through localstream's Shed, which writes gap markers that are
// replicated like any event. Below the store's own MinFreeBytes, appends
// fail with localstream.ErrDiskFull and nothing is written. The policy in
// full is in docs/devices.md.
package devices
