package watermark

// Stats is a snapshot of a Tracker's counters and gauges.
type Stats struct {
	// Notes counts marks applied.
	Notes uint64
	// RejectedBackwards counts marks refused with ErrTimeBackwards.
	RejectedBackwards uint64
	// RejectedNotAdvancing counts marks refused with ErrPositionNotAdvancing.
	RejectedNotAdvancing uint64
	// Late counts events Late answered true for.
	Late uint64
	// Closes counts writers closed (explicitly).
	Closes uint64
	// LocalEmitted counts local watermarks emitted (lower advanced).
	LocalEmitted uint64
	// CommittedEmitted counts committed watermarks emitted (lower advanced).
	CommittedEmitted uint64
	// CommittedRewound counts committed watermarks dropped because a later
	// CommittedAt came with a cut before theirs (their transaction failed
	// and was rebuilt smaller).
	CommittedRewound uint64
	// CommittedHeld counts CommittedAt calls after a restart whose cut did
	// not yet reach the tail as of the restart (no new watermark then).
	CommittedHeld uint64
	// HistoryThinned counts marks dropped from full per-writer histories
	// (uplink down for long; the committed watermark then advances in coarser steps).
	HistoryThinned uint64
	// WritersRefused counts writer ids refused beyond the writer bound.
	WritersRefused uint64
	// CoveringFallbacks counts watermarks whose cut fell back to the
	// committed (or tail) cut because localstream's Covering failed.
	CoveringFallbacks uint64
	// PersistErrors counts failed writes of marks or watermarks to the store.
	PersistErrors uint64
	// ClockSkewAhead and ClockSkewBehind count events admitted more than
	// MaxClockSkew ahead of, or MaxClockBehind behind, their ingest time
	// (flagged clock-skew; behind ones also late).
	ClockSkewAhead, ClockSkewBehind uint64
	// ClockFloored counts watermark computations with no writer open
	// (all closed or behind) that followed the receiving clock (now −
	// MaxClockSkew).
	ClockFloored uint64
	// Writers is the number of known writers; ActiveWriters of those that
	// hold the local watermark back (neither closed, idle nor behind);
	// BehindWriters of those whose latest event was behind the receiving
	// clock (they do not hold it back).
	Writers, ActiveWriters, BehindWriters int
}
