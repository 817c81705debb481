package localstream

import (
	"fmt"
	"log/slog"
	"time"
)

// Durability says when an append returns.
type Durability int

const (
	// DurabilityAlways (the default): Append returns after the Badger commit
	// holding the event is fsync'd. Concurrent appends share one commit.
	DurabilityAlways Durability = iota
	// DurabilityPeriodic: Append returns once the write reached the OS; the
	// store fsyncs every SyncInterval. A power cut can lose up to that
	// interval of acknowledged events (a process crash loses nothing).
	DurabilityPeriodic
)

// String returns "always" or "periodic".
func (d Durability) String() string {
	if d == DurabilityPeriodic {
		return "periodic"
	}
	return "always"
}

// ParseDurability parses "always" or "periodic".
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "", "always":
		return DurabilityAlways, nil
	case "periodic":
		return DurabilityPeriodic, nil
	}
	return 0, fmt.Errorf("localstream: durability %q: want always or periodic", s)
}

// Options configure a Store. The zero value gives the defaults noted on each field.
type Options struct {
	// Durability is DurabilityAlways unless set.
	Durability Durability
	// SyncInterval is the fsync period in DurabilityPeriodic mode. Default 1s.
	SyncInterval time.Duration
	// MaxEventBytes bounds one encoded event. Default 4 MiB; at most
	// MaxBatchBytes.
	MaxEventBytes int
	// QueueDepth bounds the append queue; Append blocks (back-pressure) when
	// it is full. Default 8192.
	QueueDepth int
	// MaxBatchBytes bounds the bytes of one Badger commit. Default 4 MiB.
	MaxBatchBytes int
	// MaxBatchEvents bounds the events of one Badger commit. Default 4096.
	MaxBatchEvents int
	// GroupCommitWindow is how long a batch may be held open for more
	// appends while other appends are in flight (see gather): fewer, larger
	// commits, so fewer WAL syncs per event under load. A lone writer is
	// never held. Default 1ms; negative disables (a batch is whatever is
	// queued when the committer takes it).
	GroupCommitWindow time.Duration
	// MaxInflight bounds commits written but not yet fsync'd. Default 8.
	MaxInflight int
	// ValueThreshold: Badger entries (a record, or a record batch of one
	// commit and segment) at least this large go to Badger's value log
	// instead of the LSM tree. Default 1 MiB (Badger's largest): record
	// batches stay in the LSM tree, whose tables are compressed; payloads
	// of 4 KiB and more go to payload files anyway. At most MemTableSize/10.
	ValueThreshold int64
	// MemTableSize is Badger's memtable size. Default 64 MiB.
	MemTableSize int64
	// Compactors is the number of Badger's compaction goroutines (at
	// least 2, Badger's least). Each wakes every 50 ms whether or not
	// there is anything to compact: with Badger's default of 4 an idle
	// store took 11 ms of CPU a second on the 2-core project box (under
	// load), with 2 6–8 ms — a third of what 1,000 MAVLink frames a second
	// cost a bare reader (BenchmarkMAVLinkIntake); two keep up with a
	// 2-core machine's writes. Default 2.
	Compactors int
	// ValueLogFileSize is the size of one payload file: space comes back
	// a whole file at a time, so up to two per open segment stay on disk
	// after a deletion. Default 64 MiB. (Badger's own value-log files are
	// 1 MiB, allocated whole: mmapspace.go.)
	ValueLogFileSize int64
	// MinFreeBytes is the free space of the data directory's filesystem
	// below which appends fail with ErrDiskFull (nothing written) instead
	// of letting Badger run out of space mid-write. Default 128 MiB;
	// negative disables the check. Disk-pressure policies (retention,
	// shedding) act on thresholds above it.
	MinFreeBytes int64
	// FreeSpace reports the free bytes of the filesystem holding dir.
	// Default statfs(2); tests inject a filling filesystem here.
	FreeSpace func(dir string) (int64, error)
	// CloseTimeout bounds Close: past it Close gives up on Badger (a
	// failing disk makes its Close wait forever) and returns
	// ErrCloseTimeout. Default 3 s.
	CloseTimeout time.Duration
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (ingest times of gap markers, scaling windows). Default time.Now.
	Now func() time.Time
}

// DefaultOptions returns the defaults noted on each field of Options: the
// one place their numbers are written (agent.NewDefaultConfig is built
// from it). The injected functions and the logger are left nil: nil is
// their default (statfs, time.Now, slog.Default()).
func DefaultOptions() Options {
	return Options{
		Durability:        DurabilityAlways,
		SyncInterval:      time.Second,
		MaxEventBytes:     4 << 20,
		QueueDepth:        8192,
		MaxBatchBytes:     4 << 20,
		MaxBatchEvents:    4096,
		GroupCommitWindow: time.Millisecond,
		MaxInflight:       8,
		ValueThreshold:    1 << 20,
		MemTableSize:      64 << 20,
		Compactors:        2,
		ValueLogFileSize:  64 << 20,
		MinFreeBytes:      128 << 20,
		CloseTimeout:      3 * time.Second,
	}
}

// withDefaults fills the unset fields of o from DefaultOptions and bounds
// the batch sizes by what Badger accepts.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.SyncInterval <= 0 {
		o.SyncInterval = d.SyncInterval
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = d.MaxEventBytes
	}
	if o.QueueDepth <= 0 {
		o.QueueDepth = d.QueueDepth
	}
	if o.MemTableSize <= 0 {
		o.MemTableSize = d.MemTableSize
	}
	if o.Compactors < 2 { // Badger refuses 1
		o.Compactors = d.Compactors
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = d.MaxBatchBytes
	}
	// Badger refuses a transaction above 15% of the memtable; stay below
	// 10% so that a bounded batch never hits ErrTxnTooBig.
	o.MaxBatchBytes = min(o.MaxBatchBytes, int(o.MemTableSize/10))
	if o.MaxBatchEvents <= 0 {
		o.MaxBatchEvents = d.MaxBatchEvents
	}
	if o.GroupCommitWindow == 0 {
		o.GroupCommitWindow = d.GroupCommitWindow
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = d.MaxInflight
	}
	if o.ValueThreshold <= 0 {
		o.ValueThreshold = d.ValueThreshold
	}
	// Badger refuses a threshold above its largest batch (15% of the memtable).
	o.ValueThreshold = min(o.ValueThreshold, o.MemTableSize/10)
	o.MaxEventBytes = min(o.MaxEventBytes, o.MaxBatchBytes)
	if o.ValueLogFileSize <= 0 {
		o.ValueLogFileSize = d.ValueLogFileSize
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = d.MinFreeBytes
	}
	if o.FreeSpace == nil {
		o.FreeSpace = statfsFree
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = d.CloseTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
