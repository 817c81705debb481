package replicate

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/edge-agent/edge-agent/wire"
)

// errorClass says what a replicator does after an error.
type errorClass int

const (
	// classRetryable: timeouts, disconnects, 429 too many batches, leader
	// elections, unknown commit outcomes. Resume from the central cut
	// after a short jittered backoff.
	classRetryable errorClass = iota
	// classConflict: the commit's expected last subject sequence failed. Resume;
	// fencing decides from the record now on the cut subject.
	classConflict
	// classPermanent: fenced, stream misconfigured, atomic publish unsupported,
	// central cut does not fit. The stream stops (and says so in /healthz).
	// An event too large for the centre is not an error of the stream: it
	// is replaced by a marker.
	classPermanent
)

func (c errorClass) String() string {
	switch c {
	case classRetryable:
		return "retryable"
	case classConflict:
		return "conflict"
	default:
		return "permanent"
	}
}

// classify sorts an error of the sink or replicator.
func classify(err error) errorClass {
	switch {
	case err == nil:
		return classRetryable
	case errors.Is(err, errBatchLimit), errors.Is(err, ErrMessageTooLarge), errors.Is(err, nats.ErrMaxPayload):
		// The sink lowered its limits, or the max payload changed with a
		// new connection: the transaction is built again within them.
		return classRetryable
	case errors.Is(err, ErrFenced), errors.Is(err, ErrAtomicUnsupported),
		errors.Is(err, ErrStreamMisconfigured),
		errors.Is(err, ErrCutMismatch), errors.Is(err, ErrConfig),
		errors.Is(err, wire.ErrCorruptRecord):
		return classPermanent
	case errors.Is(err, context.Canceled):
		return classRetryable
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return classConflict
		case jetstreamext.JSErrCodeBatchPublishNotEnabled,
			jetstreamext.JSErrCodeBatchPublishUnsupportedHeader, jetstreamext.JSErrCodeBatchPublishInvalidID:
			return classPermanent
		}
	}
	return classRetryable
}
