package wire

import "errors"

// Sentinel errors of the central format; test with errors.Is.
var (
	// ErrCorruptRecord: a commit record or data message cannot be decoded.
	ErrCorruptRecord = errors.New("wire: corrupt central record")
	// ErrBadToken: an escaped subject token is malformed.
	ErrBadToken = errors.New("wire: malformed subject token")
)
