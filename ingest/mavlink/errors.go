package mavlink

import "errors"

// Sentinel errors callers branch on; test with errors.Is.
var (
	// ErrConfig: a Config or SimConfig field is invalid; the message names the field.
	ErrConfig = errors.New("mavlink: invalid config")
	// ErrSigningKey: the signing key could not be read or is empty.
	ErrSigningKey = errors.New("mavlink: signing key")
	// ErrStore: the store failed an append; the intake stops.
	ErrStore = errors.New("mavlink: store append failed")
	// ErrListen: a listen address cannot be bound.
	ErrListen = errors.New("mavlink: listen")
	// ErrClosed: Run was called again (an Intake runs once).
	ErrClosed = errors.New("mavlink: intake already ran")
	// ErrTlog: a tlog file is truncated or holds bytes that are no frame.
	ErrTlog = errors.New("mavlink: tlog")
)
