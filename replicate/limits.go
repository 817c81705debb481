package replicate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Limits are the central server's limits that every transaction must fit
// (docs/design.md rule 13). The server announces only its max payload (in the
// INFO of every connection); the others are server configuration a client
// cannot read, so they are configured (defaults: nats-server's defaults)
// and lowered to what the server's rejections say: a batch over the
// server's max batch size is refused with the limit in the error, and a
// second open batch over max in-flight batches is refused too.
type Limits struct {
	// MaxPayload is the largest message, headers included, in bytes.
	// Learned from the server's INFO; default (before the first
	// connection) 1 MiB.
	MaxPayload int64 `json:"max_payload"`
	// MaxControlLine is the longest protocol line the server reads
	// (max_control_line). Not announced; default 4,096. Subjects are
	// bounded (MaxTokenBytes) far below it.
	MaxControlLine int `json:"max_control_line"`
	// MaxBatchSize is the most messages in one atomic batch (jetstream
	// limits batch max_msgs), the commit record included. Default 1,000;
	// lowered to the limit a rejected batch reports.
	MaxBatchSize int `json:"max_batch_size"`
	// MaxBatchInflight is the most atomic batches open at once on one
	// stream (batch max_inflight_per_stream). Default 50; the replicator
	// pipelines (two open batches) only when it is at least 2, and it
	// drops to 1 when the server refuses a second open batch.
	MaxBatchInflight int `json:"max_batch_inflight"`
	// BatchTimeout is how long the server keeps a batch open without its
	// commit (batch timeout). Default 10 s.
	BatchTimeout time.Duration `json:"batch_timeout_ns"`
}

// DefaultLimits are nats-server's defaults.
func DefaultLimits() Limits {
	return Limits{MaxPayload: 1 << 20, MaxControlLine: 4096, MaxBatchSize: 1000, MaxBatchInflight: 50, BatchTimeout: 10 * time.Second}
}

// minControlLine is the shortest control line the agent works with: its
// longest subject (stream 63 bytes, agent and key tokens MaxTokenBytes)
// plus a reply inbox and sizes fit in it.
const minControlLine = 512

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxPayload <= 0 {
		l.MaxPayload = d.MaxPayload
	}
	if l.MaxControlLine <= 0 {
		l.MaxControlLine = d.MaxControlLine
	}
	if l.MaxBatchSize <= 0 {
		l.MaxBatchSize = d.MaxBatchSize
	}
	if l.MaxBatchInflight <= 0 {
		l.MaxBatchInflight = d.MaxBatchInflight
	}
	if l.BatchTimeout <= 0 {
		l.BatchTimeout = d.BatchTimeout
	}
	return l
}

// Validate checks configured limits; the error names the field.
func (l Limits) Validate() error {
	switch {
	case l.MaxControlLine > 0 && l.MaxControlLine < minControlLine:
		return fmt.Errorf("%w: central.max_control_line %d is below %d; the agent's subjects need it", ErrConfig, l.MaxControlLine, minControlLine)
	case l.MaxBatchSize == 1:
		return fmt.Errorf("%w: central.max_batch_size 1 leaves no room for an event beside the commit record; set it to at least 2", ErrConfig)
	case l.MaxPayload > 0 && l.MaxPayload < minMaxPayload:
		return fmt.Errorf("%w: central max payload %d is below %d bytes", ErrConfig, l.MaxPayload, minMaxPayload)
	}
	return nil
}

// minMaxPayload is the smallest central max payload the agent works with:
// a commit record and a marker must fit.
const minMaxPayload = 64 << 10

// messageOverhead is what a central data message adds to an event's
// payload and local header values, at most: the position, time, writer,
// transaction and flag headers with their names, the atomic batch headers
// the publisher adds, and room for percent-encoding short values.
const messageOverhead = 2 << 10

// EventFits reports whether a local event whose payload and header values
// (MQTT topic, frame PTS list, others) total n bytes fits in one central
// message under l; intake bounds its chunks and messages with it.
func (l Limits) EventFits(n int64) bool {
	l = l.withDefaults()
	return n+messageOverhead <= l.MaxPayload
}

// CheckIntake refuses an intake setting (named by field, e.g.
// "video.chunk_max_bytes") that lets one stored event carry more than
// fits in a central message, so that everything stored can be sent. bytes
// is the most payload and header bytes one event can have under it.
func (l Limits) CheckIntake(field string, bytes int64) error {
	l = l.withDefaults()
	if l.EventFits(bytes) {
		return nil
	}
	return fmt.Errorf("%w: %s %d is above the central max payload %d minus %d bytes of message headers; set it to at most %d",
		ErrConfig, field, bytes, l.MaxPayload, messageOverhead, l.MaxPayload-messageOverhead)
}

// batchTooLarge returns the server's max batch size when err is its
// rejection of a batch over it ("atomic publish batch is too large: N",
// nats-server errors.json JSAtomicPublishTooLargeBatchErrF), or 0.
func batchTooLarge(err error) (limit int, ok bool) {
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != jetstreamext.JSErrCodeBatchPublishExceedsLimit {
		return 0, false
	}
	d := api.Description
	i := strings.LastIndexByte(d, ' ')
	n, perr := strconv.Atoi(strings.TrimSpace(d[i+1:]))
	if perr != nil || n < 1 {
		return 0, true // the limit is below what we sent; the caller halves
	}
	return n, true
}

// tooManyInflight reports whether err is the server's refusal of another
// open atomic batch.
func tooManyInflight(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstreamext.JSErrCodeAtomicPublishTooManyInflight ||
		api.ErrorCode == jetstreamext.JSErrCodeBatchPublishTooManyInflight)
}

// batchIncomplete reports whether err is the server's "atomic publish
// batch is incomplete": a message of the batch never arrived or was
// refused.
func batchIncomplete(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstreamext.JSErrCodeBatchPublishIncomplete
}
