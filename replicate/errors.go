package replicate

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Sentinel errors callers branch on; test with errors.Is.
var (
	// ErrFenced: another agent process with the same agent id committed to
	// this stream; this replicator stopped. Permanent.
	ErrFenced = errors.New("replicate: fenced: another agent uses this agent id")
	// ErrTwin: the agent's chain is another station's (a second station
	// with the same agent id, a record written before store identities
	// that this store did not write), or a copy of this store elsewhere
	// writes it; this replicator stopped and the store keeps capturing
	// locally. It wraps ErrFenced. Permanent until an operator stops one
	// or takes over (--takeover); never decided by how long the other was
	// silent.
	// Its text claims no more than is known: the other writer may be a
	// record from before store identities whose store cannot be told.
	ErrTwin = fmt.Errorf("%w: the agent's chain is not this store's to write", ErrFenced)
	// ErrNoStation: the machine has no usable machine id, so the station
	// identity is unknown (MachineStation).
	ErrNoStation = errors.New("replicate: no machine id for the station identity")
	// ErrAtomicUnsupported: the central server or stream does not support
	// atomic batch publish (server 2.12+ and allow_atomic are needed). Permanent.
	ErrAtomicUnsupported = errors.New("replicate: central store does not support atomic batch publish (needs NATS server 2.12+ and allow_atomic)")
	// ErrStreamMisconfigured: EDGE_<STREAM> exists with settings that break
	// the contract (subjects, atomic publish, direct get). Permanent.
	ErrStreamMisconfigured = errors.New("replicate: central stream misconfigured")
	// ErrMessageTooLarge: an event does not fit the server's max payload.
	// It concerns that event only: the replicator sends a marker in its
	// place (Txn.AddMarker) and goes on.
	ErrMessageTooLarge = errors.New("replicate: event larger than the central max payload")
	// errBatchLimit: the server refused a batch for its batch limits; the
	// sink lowered its limits, and the transaction is retried within them.
	errBatchLimit = errors.New("replicate: over the central batch limits")
	// ErrCutMismatch: the central commit record's cut does not fit the local
	// stream (data lost locally, or another agent's record). Permanent.
	ErrCutMismatch = errors.New("replicate: central cut does not fit the local stream")
	// ErrTxnClosed: a transaction was used after commit or discard.
	ErrTxnClosed = errors.New("replicate: transaction closed")
	// ErrConfig: invalid configuration; the message names the field.
	ErrConfig = errors.New("replicate: invalid config")
	// errTxnFull: the event does not fit the transaction's message; it
	// opens the next transaction.
	errTxnFull = errors.New("replicate: transaction full")
	// errLinkLost: the connection dropped while a request was in flight.
	errLinkLost = errors.New("replicate: link to central lost")
	// ErrClosed: the component is closed.
	ErrClosed = errors.New("replicate: closed")
)

// ErrNotConnected: the connection to the central server is down; nats.go
// then fails a publish with "outbound buffer limit exceeded" (no buffering
// while disconnected), which says nothing to an operator. Retryable.
var ErrNotConnected = errors.New("replicate: central not connected (capturing locally, retrying)")

// explainDisconnected puts ErrNotConnected in front of the errors nats.go
// returns while disconnected.
func explainDisconnected(err error) error {
	if errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) {
		return fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	return err
}
