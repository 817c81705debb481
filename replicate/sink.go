package replicate

import (
	"context"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// Sink is where transactions go: the central store seen from one agent.
// Implementations are safe for concurrent use by one replicator per stream.
type Sink interface {
	// Prepare makes sure the central side of a local stream exists and can
	// take atomic transactions.
	Prepare(ctx context.Context, stream string) error
	// LastCommitted reads the agent's last commit on the stream as the
	// central store has it now (through the leader); zero when none.
	LastCommitted(ctx context.Context, stream string) (Committed, error)
	// Begin starts transaction number (the previous commit's txn + 1). Its
	// events may be sent before the previous commit is acked.
	Begin(stream string, number uint64) Txn
	// Limits are the central limits as known now (transactions are sized
	// below them).
	Limits() Limits
}

// Txn is one transaction: events added in order, then one commit. It is
// not safe for concurrent use. Nothing is visible centrally before Commit
// succeeds; a failed or abandoned transaction leaves nothing.
type Txn interface {
	// Add sends one event of the transaction.
	Add(ctx context.Context, rec localstream.Record) error
	// AddMarker sends, in place of rec, a marker with rec's position and
	// the reason rec cannot be sent (after Add failed with
	// ErrMessageTooLarge).
	AddMarker(ctx context.Context, rec localstream.Record, reason string) error
	// Commit sends the commit record (cut and watermark in central
	// positions, meta), expecting prev to be the agent's last commit
	// (fencing), and waits for the outcome. An error means the outcome is
	// unknown unless it is a rejection (see Classify); LastCommitted tells.
	Commit(ctx context.Context, prev Committed, cut localstream.StreamCut, wm watermark.Watermark, meta wire.CommitMeta) (Committed, error)
	// Discard abandons the transaction; the server drops it after its
	// batch timeout.
	Discard()
	// Len and Bytes are the events and payload bytes added so far.
	Len() int
	Bytes() int64
	// Number is the transaction's number.
	Number() uint64
}

// Committed is the last commit of an agent on a stream as the central
// store has it: the zero value means "nothing committed yet".
type Committed struct {
	// Seq is the commit record's stream sequence (0: none), the value the
	// next commit expects as Nats-Expected-Last-Subject-Sequence.
	Seq uint64
	// Record is the commit record (zero when Seq is 0).
	Record wire.CommitRecord
}
