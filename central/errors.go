package central

import "errors"

// Sentinel errors callers branch on; test with errors.Is.
var (
	// ErrConfig: the configuration is invalid; the message names the field.
	ErrConfig = errors.New("central: invalid config")
	// ErrNotReady: the server did not become ready (client port or JetStream) in time.
	ErrNotReady = errors.New("central: server not ready")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("central: server closed")
)
