// Package guard holds the defences every intake puts in front of what
// untrusted senders can reach, written once:
//
//   - Table: a bounded table of per-source entries (drones, system ids,
//     SSRCs) that gives back the slot of an entry silent for an idle
//     timeout when a newcomer needs it, and counts the newcomers it
//     refuses while every slot is held by a live entry.
//   - Limiter: a net.Listener that bounds the connections open at once
//     (in all and per source address), closes a connection silent past
//     its read deadline, and admits a newcomer by evicting the
//     connection that has waited longest without doing anything — the
//     idle or the unauthenticated — so that idle sockets cannot lock a
//     real sender out.
//   - Binding: an id bound to the first sender (address, connection) it
//     came from until that sender has been silent for a while or went
//     away; the same id from anyone else meanwhile is a spoof, counted.
//
// Time is an input: Table and Binding take the caller's receive time
// (Unix ns from the intake's injected clock), the Limiter an injected
// Now. None of them logs; each counts what it turns away.
//
// The intakes using them: ingest/mavlink (UDP, TCP, tlog), ingest/video
// (RTP push, RTSP pull), ingest/telemetry's MQTT listener, the live lane's
// follower (live) and the agent's HTTP endpoints (agent).
package guard
