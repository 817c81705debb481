package watermark

import "errors"

// Sentinel errors callers branch on. They are wrapped with the values that
// explain them; test with errors.Is.
var (
	// ErrTimeBackwards: a writer noted a time earlier than the time it noted
	// before (beyond its allowed lateness). The mark is not applied; the
	// event itself is stored and was answered late by Late.
	ErrTimeBackwards = errors.New("watermark: writer time goes backwards")
	// ErrPositionNotAdvancing: a writer noted a position at or before one it
	// noted already (same segment, not a later offset; or a predecessor of
	// a segment it already wrote to). The mark is not applied.
	ErrPositionNotAdvancing = errors.New("watermark: writer position does not advance")
	// ErrCutRegressed: CommittedAt was given a cut that is not at or after
	// the cut of the committed watermark already returned; committed cuts
	// only move forward.
	ErrCutRegressed = errors.New("watermark: committed cut moved back")
	// ErrInvalidWriter: a writer id is empty or too long (at most 255 bytes).
	ErrInvalidWriter = errors.New("watermark: invalid writer id")
	// ErrCorruptRecord: a persisted mark or watermark cannot be decoded.
	ErrCorruptRecord = errors.New("watermark: corrupt record")
	// ErrUnsupportedVersion: a persisted record has a version this build cannot read.
	ErrUnsupportedVersion = errors.New("watermark: unsupported record version")
)

// ErrTooManyWriters: a stream already has the maximum number of writers
// (4096); a new writer id is refused (counted in Stats.WritersRefused).
var ErrTooManyWriters = errors.New("watermark: too many writers")
