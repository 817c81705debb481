package flight

import "errors"

var (
	// ErrConfig: the options of a call are wrong (the message says which).
	ErrConfig = errors.New("flight: bad options")
	// ErrNoFlight: the drone has no flight of that number, or no events
	// in the range.
	ErrNoFlight = errors.New("flight: no such flight")
	// ErrSeveralAgents: the drone's flight was captured by more than one
	// agent; name one with Agent.
	ErrSeveralAgents = errors.New("flight: several agents captured the drone")
	// ErrVerify: a record failed verification; the wrapped text names the
	// first cause, VerifyReport.Problems all of them.
	ErrVerify = errors.New("flight: verification failed")
	// ErrKey: a key file is missing, unreadable or not an Ed25519 key.
	ErrKey = errors.New("flight: bad key")
)
