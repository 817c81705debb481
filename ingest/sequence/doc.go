// Package sequence classifies the arrivals of a stream numbered by a
// wrapping sequence number — MAVLink's 8-bit, RTP's 16-bit — against a
// window of the newest numbers seen. It is the one copy of that job:
// every intake that reads sequence numbers (ingest/mavlink,
// ingest/video) asks a Window what an arrival is, and counts and flags
// from its answer. It holds no packets: an intake that must put packets
// back in order (RTP, for payload reassembly) keeps its own buffer and
// asks the Window only what each packet is.
//
// A Window of size W remembers the state of the W numbers ending at the
// newest seen ("top"); top never moves backwards:
//
//	           behind (W-1 numbers)            top      ahead (≤ MaxJump)
//	... far ][ . S S H S G S S H S S S S S S S [S] ][ 1 2 3 ... MaxJump ][ far ...
//	         └──────────── window ─────────────────┘
//	S seen   H hole (skipped, not yet decided)   G gone (a hole declared lost)
//	. unknown (before the first number, or after a restart)
//
// An arrival is, by where its number falls:
//
//	ahead by 1           Next
//	ahead by 2..MaxJump  Ahead: Skipped numbers become holes
//	top, or behind, S    Duplicate (with Tags: the same tag; another tag
//	                     there is the sender's numbering restarted: Restart)
//	behind, H or .       Reordered: fills its hole; not lost, no discontinuity
//	behind, G            Late: its hole was already declared lost
//	far (either side)    Restart (with Probation: Suspect first, and a
//	                     Restart when the next number follows it, RFC 3550 A.1)
//
// A hole is declared lost once: when top moves W numbers past it (it
// leaves the window, Result.Lost of that arrival), when the caller gives
// it up (GiveUp: a reorder buffer stopped waiting for it), at Flush (the
// stream went quiet), or at a Restart (Result.Lost). So the sum of Lost
// over a stream is the numbers that never arrived, each counted once,
// and a reordered number is never counted.
//
// A Window is not safe for concurrent use; its owner serializes calls.
// It allocates only in New.
package sequence
