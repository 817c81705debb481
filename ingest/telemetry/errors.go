package telemetry

import (
	"errors"
	"fmt"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttlisten"
)

// Sentinel errors callers branch on; test with errors.Is.
var (
	// ErrConfig: a Config or SimConfig field is invalid; the message names the field.
	ErrConfig = errors.New("telemetry: invalid config")
	// ErrPattern: a topic pattern is malformed.
	ErrPattern = errors.New("telemetry: invalid topic pattern")
	// ErrCredentials: a TLS or password file could not be read or parsed.
	ErrCredentials = errors.New("telemetry: credentials")
	// ErrCorruptDedup: a stored dedup entry cannot be decoded.
	ErrCorruptDedup = dedup.ErrCorrupt
	// ErrStore: the store failed an append; the ingester stops (restart it:
	// the dedup entries on disk then make redeliveries safe).
	ErrStore = errors.New("telemetry: store append failed")
	// ErrListen: the listen address cannot be bound (in use, not local).
	ErrListen = mqttlisten.ErrListen
	// ErrClosed: Run was called again (an Ingester runs once; its ctx
	// ending is the stop).
	ErrClosed = errors.New("telemetry: ingester already ran")

	// errStopping: the ingester is stopping; a message waiting for disk
	// space was left unacknowledged.
	errStopping = errors.New("telemetry: stopping")
)

// PatternError is a malformed topic pattern; it wraps ErrPattern.
type PatternError struct {
	// Pattern is the pattern as configured.
	Pattern string
	// Reason says what is wrong and how to fix it.
	Reason string
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("%v %q: %s", ErrPattern, e.Pattern, e.Reason)
}

func (e *PatternError) Unwrap() error { return ErrPattern }
