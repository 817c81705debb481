package wire

import (
	"errors"
	"fmt"
)

// Sentinel errors of the central format; test with errors.Is.
var (
	// ErrCorruptRecord: a commit record or data message cannot be decoded.
	ErrCorruptRecord = errors.New("wire: corrupt central record")
	// ErrBadToken: an escaped subject token is malformed.
	ErrBadToken = errors.New("wire: malformed subject token")
)

// ErrPackChecksum: a pack's CRC-32C does not match its bytes: it was
// changed after the agent wrote it. It wraps ErrCorruptRecord.
var ErrPackChecksum = fmt.Errorf("%w: pack checksum mismatch", ErrCorruptRecord)
