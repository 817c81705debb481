package watermark

// Stats is a snapshot of a Tracker's counters and gauges.
type Stats struct {
	// Notes counts marks applied.
	Notes uint64 `json:"notes"`
	// RejectedBackwards counts marks refused with ErrTimeBackwards.
	RejectedBackwards uint64 `json:"rejected_backwards"`
	// RejectedNotAdvancing counts marks refused with ErrPositionNotAdvancing.
	RejectedNotAdvancing uint64 `json:"rejected_not_advancing"`
	// Late counts events Late answered true for.
	Late uint64 `json:"late"`
	// Closes counts writers closed (explicitly).
	Closes uint64 `json:"closes"`
	// LocalEmitted counts local watermarks emitted (lower advanced).
	LocalEmitted uint64 `json:"local_emitted"`
	// CommittedEmitted counts committed watermarks emitted (lower advanced).
	CommittedEmitted uint64 `json:"committed_emitted"`
	// CommittedRewound counts committed watermarks dropped because a later
	// CommittedAt came with a cut before theirs (their transaction failed
	// and was rebuilt smaller).
	CommittedRewound uint64 `json:"committed_rewound"`
	// CommittedHeld counts CommittedAt calls after a restart whose cut did
	// not yet reach the tail as of the restart (no new watermark then).
	CommittedHeld uint64 `json:"committed_held"`
	// HistoryThinned counts marks dropped from full per-writer histories
	// (uplink down for long; the committed watermark then advances in coarser steps).
	HistoryThinned uint64 `json:"history_thinned"`
	// WritersRefused counts writer ids refused beyond the writer bound.
	WritersRefused uint64 `json:"writers_refused"`
	// CoveringFallbacks counts watermarks whose cut fell back to the
	// committed (or tail) cut because localstream's Covering failed.
	CoveringFallbacks uint64 `json:"covering_fallbacks"`
	// PersistErrors counts failed writes of marks or watermarks to the store.
	PersistErrors uint64 `json:"persist_errors"`
	// ClockSkewAhead and ClockSkewBehind count events admitted more than
	// MaxClockSkew ahead of, or MaxClockBehind behind, their ingest time
	// (flagged clock-skew; behind ones also late).
	ClockSkewAhead  uint64 `json:"clock_skew_ahead"`
	ClockSkewBehind uint64 `json:"clock_skew_behind"`
	// ClockFloored counts watermark computations with no writer open
	// (all closed or behind) that followed the receiving clock (now −
	// MaxClockSkew).
	ClockFloored uint64 `json:"clock_floored"`
	// Writers is the number of known writers; ActiveWriters of those that
	// hold the local watermark back (neither closed, idle nor behind);
	// BehindWriters of those whose latest event was behind the receiving
	// clock (they do not hold it back).
	Writers       int `json:"writers"`
	ActiveWriters int `json:"active_writers"`
	BehindWriters int `json:"behind_writers"`
}
