package localstream

import "errors"

// Sentinel errors callers branch on. They are wrapped with the numbers or
// names that explain them; test with errors.Is.
var (
	// ErrInvalidStreamName: a stream name does not match ^[a-z][a-z0-9_-]{0,62}$.
	ErrInvalidStreamName = errors.New("localstream: invalid stream name")
	// ErrStreamNotFound: the stream does not exist.
	ErrStreamNotFound = errors.New("localstream: stream not found")
	// ErrEventTooLarge: an event's encoded size is above Options.MaxEventBytes.
	ErrEventTooLarge = errors.New("localstream: event too large")
	// ErrInvalidEvent: an event misses its routing key or writer, or a header is malformed.
	ErrInvalidEvent = errors.New("localstream: invalid event")
	// ErrCorruptCut: a stream cut's text or binary form cannot be decoded.
	ErrCorruptCut = errors.New("localstream: corrupt stream cut")
	// ErrForeignCut: a stream cut names another stream, unknown segments, or
	// does not cover the key space exactly once.
	ErrForeignCut = errors.New("localstream: stream cut does not fit this stream")
	// ErrCorruptRecord: a stored record cannot be decoded.
	ErrCorruptRecord = errors.New("localstream: corrupt record")
	// ErrUnsupportedVersion: a stored record has a version this build cannot read.
	ErrUnsupportedVersion = errors.New("localstream: unsupported record version")
	// ErrSealed: a scale named a segment that is already sealed.
	ErrSealed = errors.New("localstream: segment sealed")
	// ErrInvalidScale: a scale request's ranges do not cover the sealed segments' ranges exactly.
	ErrInvalidScale = errors.New("localstream: invalid scale")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("localstream: store closed")
	// ErrTruncated: a read asked for data before the truncation point.
	ErrTruncated = errors.New("localstream: position truncated")
	// ErrNotReplicated: a truncation would delete data outside a sink's committed cut.
	ErrNotReplicated = errors.New("localstream: data not yet replicated")
	// ErrEndOfCut: a bounded reader reached its end cut.
	ErrEndOfCut = errors.New("localstream: end of cut")
	// ErrDiskFull: free space is below Options.MinFreeBytes; the append was not written.
	ErrDiskFull = errors.New("localstream: disk full")
	// ErrFailed: a write failed, or the directory is gone (ErrDirGone);
	// every later write fails with it (Store.Err) until the store is
	// reopened. Reads of what is durable go on.
	ErrFailed = errors.New("localstream: write failed, store needs reopening")
	// ErrDirGone: the store's directory was removed or replaced under it;
	// the store has failed (Store.Failed).
	ErrDirGone = errors.New("localstream: data directory gone")
	// ErrCloseTimeout: Close gave up waiting for Badger (Options.CloseTimeout).
	ErrCloseTimeout = errors.New("localstream: close timed out")
	// ErrCaughtUp: a non-blocking read found no durable event beyond the reader's position.
	ErrCaughtUp = errors.New("localstream: caught up")
)
