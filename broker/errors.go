package broker

import "errors"

// Sentinel errors callers branch on; test with errors.Is.
var (
	// ErrStopped: the broker was stopped; it cannot be restarted.
	ErrStopped = errors.New("broker: stopped")
	// ErrNotReady: the broker did not accept connections in time.
	ErrNotReady = errors.New("broker: not ready")
	// ErrNoBinary: no mosquitto binary was found and the embedded fallback was disabled.
	ErrNoBinary = errors.New("broker: mosquitto binary not found")
)
