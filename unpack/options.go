package unpack

import (
	"fmt"
	"log/slog"
	"time"
)

// Options configure an Unpacker or a Service. Start from DefaultOptions.
type Options struct {
	// Replicas of a derived stream the unpacker creates. Default 0 = as
	// many as its source stream has.
	Replicas int
	// MaxPending bounds the derived messages in flight (sent, not yet
	// acked). Derived messages are plain publishes, each with its fence
	// (Nats-Expected-Last-Sequence), and one in every fifth of
	// MaxPending (at most 500) asks for the server's ack, which covers
	// every message before it; at most four acks are awaited at once.
	// Default 2,048; at most 4,096.
	MaxPending int
	// MaxPendingBytes bounds the bytes in flight, counted as payload and
	// 1 KiB of headers a message (one message may exceed it alone). Default 32 MiB, a quarter of the
	// server's ingest queue per stream.
	MaxPendingBytes int64
	// AckTimeout bounds the wait for one publish's ack; a missing ack
	// ends the session, which resumes from the cursor. Default 10 s.
	AckTimeout time.Duration
	// RequestTimeout bounds one API request (stream info, cursor read,
	// stream creation). Default 5 s.
	RequestTimeout time.Duration
	// StandbyCheck is how often a fenced instance (a standby) looks at
	// the derived stream; it takes over once the stream has not moved for
	// one check. Default 2 s.
	StandbyCheck time.Duration
	// RetryWait is the pause after a first failed session (no leader, a
	// lost link) before the next; it doubles with each failure in a row,
	// up to MaxRetryWait, with jitter (a wait is between half and all of
	// its step). Default 250 ms.
	RetryWait time.Duration
	// MaxRetryWait caps RetryWait's doubling. Default 30 s.
	MaxRetryWait time.Duration
	// DiscoverInterval is how often a Service without a fixed stream list
	// looks for new EDGE_<STREAM> streams. Default 10 s.
	DiscoverInterval time.Duration
	// Partitions splits each derived stream into that many, by agent
	// (see Partition; PartitionOf is the documented hash): EDGEEV_<STREAM>_P<i>
	// on edgeev.<stream>.p<i>.<agent>.<key>, each with its own cursor and
	// fence, so that N unpackers spread the fan-out over N stream
	// leaders. Default 0 = 1: EDGEEV_<STREAM> on edgeev.<stream>.<agent>.<key>,
	// as before partitions existed. At most 64. Changing it needs new
	// derived streams: an unpacker refuses (ErrDerivedMisconfigured) a
	// derived stream made with another count.
	Partitions int
	// Only lists the partitions (0 … Partitions-1) a Service runs, one
	// Unpacker each. Default none: every partition.
	Only []int
	// Skip lists source sequences the operator allows the unpacker to
	// skip when they do not decode (a pack of a newer version, a failed
	// checksum): each is replaced in the derived stream by a skip marker
	// that names it and why (docs/unpack.md). A sequence that decodes is
	// never skipped. Default none: the unpacker stops at such a message.
	Skip []uint64
	// Logger receives session starts, failures and fencing. Default
	// slog.Default().
	Logger *slog.Logger
}

// DefaultOptions returns the options with every default filled in.
func DefaultOptions() Options {
	return Options{
		MaxPending:       2048,
		MaxPendingBytes:  32 << 20,
		AckTimeout:       10 * time.Second,
		RequestTimeout:   5 * time.Second,
		StandbyCheck:     2 * time.Second,
		RetryWait:        250 * time.Millisecond,
		MaxRetryWait:     30 * time.Second,
		DiscoverInterval: 10 * time.Second,
		Logger:           slog.Default(),
	}
}

// withDefaults fills the zero fields from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.MaxPending == 0 {
		o.MaxPending = d.MaxPending
	}
	if o.MaxPendingBytes == 0 {
		o.MaxPendingBytes = d.MaxPendingBytes
	}
	if o.AckTimeout == 0 {
		o.AckTimeout = d.AckTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = d.RequestTimeout
	}
	if o.StandbyCheck == 0 {
		o.StandbyCheck = d.StandbyCheck
	}
	if o.RetryWait == 0 {
		o.RetryWait = d.RetryWait
	}
	if o.MaxRetryWait == 0 {
		o.MaxRetryWait = max(d.MaxRetryWait, o.RetryWait)
	}
	if o.DiscoverInterval == 0 {
		o.DiscoverInterval = d.DiscoverInterval
	}
	if o.Logger == nil {
		o.Logger = d.Logger
	}
	return o
}

// validate checks options after defaults and names the field to fix.
func (o Options) validate() error {
	switch {
	case o.Replicas < 0 || o.Replicas > 5:
		return fmt.Errorf("%w: replicas %d (want 0 = as the source, or 1..5)", ErrConfig, o.Replicas)
	case o.Partitions < 0 || o.Partitions > MaxPartitions:
		return fmt.Errorf("%w: partitions %d (want 0 or 1 = one derived stream per source stream, or 2..%d)", ErrConfig, o.Partitions, MaxPartitions)
	case o.MaxPending < 1 || o.MaxPending > 4096:
		return fmt.Errorf("%w: max pending %d (want 1..4096)", ErrConfig, o.MaxPending)
	case o.MaxPendingBytes < 0:
		return fmt.Errorf("%w: max pending bytes %d (want > 0)", ErrConfig, o.MaxPendingBytes)
	case o.MaxRetryWait < o.RetryWait:
		return fmt.Errorf("%w: max retry wait %s below retry wait %s", ErrConfig, o.MaxRetryWait, o.RetryWait)
	case o.AckTimeout < 0, o.RequestTimeout < 0, o.StandbyCheck < 0, o.RetryWait < 0, o.DiscoverInterval < 0:
		return fmt.Errorf("%w: a negative duration (ack timeout %s, request timeout %s, standby check %s, retry wait %s, discover interval %s)",
			ErrConfig, o.AckTimeout, o.RequestTimeout, o.StandbyCheck, o.RetryWait, o.DiscoverInterval)
	}
	for _, i := range o.Only {
		if i < 0 || i >= max(o.Partitions, 1) {
			return fmt.Errorf("%w: partition %d of %d (want 0..%d)", ErrConfig, i, max(o.Partitions, 1), max(o.Partitions, 1)-1)
		}
	}
	return nil
}

// MaxPartitions bounds Options.Partitions: a stream leader per
// partition, and a cluster has far fewer servers than that.
const MaxPartitions = 64
