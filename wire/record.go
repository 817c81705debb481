package wire

import (
	"encoding/json"
	"fmt"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// WatermarkJSON is a watermark in a commit record.
type WatermarkJSON struct {
	LowerNs int64              `json:"lower_ns"`
	UpperNs int64              `json:"upper_ns"`
	Cut     localstream.CutMap `json:"cut,omitempty"`
}

// CommitRecord is the last message of every transaction, on
// edge.<stream>.<agent>.cut.
type CommitRecord struct {
	// Agent and Stream name the writer of the transaction.
	Agent  string `json:"agent"`
	Stream string `json:"stream"`
	// Txn numbers the agent's transactions on this stream from 1.
	Txn uint64 `json:"txn"`
	// Instance is random per replicator run: it tells our own commits from
	// another process's when a fencing expectation fails.
	Instance string `json:"instance"`
	// Store is the identity of the local store whose events the
	// transaction holds (localstream.Store.ID). Records written before
	// store identities have none: another store's, unless the reading
	// store wrote records before identities itself (resume.go).
	Store string `json:"store,omitempty"`
	// Station is the identity of the station the store ran on
	// (MachineStation; absent: unknown). It tells a replaced disk or a
	// restored backup of this station from another station (resume.go).
	Station string `json:"station,omitempty"`
	// EpochBase is added to the epoch of every segment id of the store in
	// this transaction (data messages' Edge-Segment, Cut, Watermark.Cut),
	// so that a store that lost data, or replaced another, never reuses a
	// position the centre has seen (see resume.go). Absent: 0.
	EpochBase uint32 `json:"epoch_base,omitempty"`
	// Lost, when set, is a gap marker: events found lost when this
	// transaction's chain resumed.
	Lost *LostRange `json:"lost,omitempty"`
	// Cut is the local stream cut after the last event of the transaction.
	Cut localstream.CutMap `json:"cut"`
	// CutText is Cut in the stream cut's text form (for people).
	CutText string `json:"cut_text,omitempty"`
	// Watermark is the committed watermark at Cut.
	Watermark WatermarkJSON `json:"watermark"`
	// Events and Bytes count the transaction's data messages and payload bytes.
	Events int   `json:"events"`
	Bytes  int64 `json:"bytes"`
	// CommittedAtNs is the agent's clock when it sent the commit.
	CommittedAtNs int64 `json:"committed_at_ns"`
}

// CommitMeta is what a replicator adds to a commit record besides the
// cut and the watermark.
type CommitMeta struct {
	// Store, Station, EpochBase and Lost are copied to the record's
	// fields.
	Store, Station string
	EpochBase      uint32
	Lost           *LostRange
}

// newCommitRecord fills a record. cut and wm are in central positions.
func NewCommitRecord(agent, stream, instance string, txn uint64, cut localstream.StreamCut, wm watermark.Watermark, meta CommitMeta, events int, bytes int64, now int64) CommitRecord {
	return CommitRecord{
		Agent: agent, Stream: stream, Txn: txn, Instance: instance,
		Store: meta.Store, Station: meta.Station, EpochBase: meta.EpochBase, Lost: meta.Lost,
		Cut: cut.Map(), CutText: cut.String(),
		Watermark: WatermarkJSON{LowerNs: wm.LowerNs, UpperNs: wm.UpperNs, Cut: wm.Cut.Map()},
		Events:    events, Bytes: bytes, CommittedAtNs: now,
	}
}

// StreamCut is the record's cut as a stream cut.
func (r CommitRecord) StreamCut() (localstream.StreamCut, error) { return r.Cut.Cut(r.Stream) }

// WatermarkValue is the record's watermark.
func (r CommitRecord) WatermarkValue() (watermark.Watermark, error) {
	c, err := r.Watermark.Cut.Cut(r.Stream)
	if err != nil {
		return watermark.Watermark{}, err
	}
	return watermark.Watermark{LowerNs: r.Watermark.LowerNs, UpperNs: r.Watermark.UpperNs, Cut: c}, nil
}

// DecodeCommitRecord parses and checks a commit record.
func DecodeCommitRecord(b []byte) (CommitRecord, error) {
	var r CommitRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return CommitRecord{}, fmt.Errorf("%w: commit record: %v", ErrCorruptRecord, err)
	}
	if r.Agent == "" || r.Txn == 0 || len(r.Cut) == 0 {
		return CommitRecord{}, fmt.Errorf("%w: commit record without agent, txn or cut", ErrCorruptRecord)
	}
	if err := localstream.ValidateStreamName(r.Stream); err != nil {
		return CommitRecord{}, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	}
	if _, err := r.Cut.Cut(r.Stream); err != nil {
		return CommitRecord{}, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	}
	if _, err := r.Watermark.Cut.Cut(r.Stream); err != nil {
		return CommitRecord{}, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	}
	if r.Lost != nil {
		if err := r.Lost.check(r.Stream); err != nil {
			return CommitRecord{}, err
		}
	}
	return r, nil
}

// decodeCommitMessage decodes the message on an agent's cut subject: a
// layout-2 pack (its commit record; agent and stream from the subject) or
// a layout-1 JSON commit record.
func DecodeCommitMessage(stream, agent string, data []byte) (CommitRecord, error) {
	if !isPack(data) {
		return DecodeCommitRecord(data)
	}
	p, err := decodePack(stream, data)
	if err != nil {
		return CommitRecord{}, err
	}
	if p.commit == nil {
		return CommitRecord{}, fmt.Errorf("%w: pack on the cut subject without commit record", ErrCorruptRecord)
	}
	return p.commit.Record(agent, stream), nil
}

// LossReason says how events came to be lost.
type LossReason string

const (
	// LossLocalTail: the local store lost events that the centre had
	// committed (a power cut in periodic durability, a restored backup);
	// the events it had after the centre's cut are lost, end unknown.
	LossLocalTail LossReason = "local-tail-lost"
	// LossStoreReplaced: another store took over the agent's chain; the
	// old store's events after its last commit are lost, end unknown.
	LossStoreReplaced LossReason = "store-replaced"
	// LossCentralTail: the centre lost commits; what the local store no
	// longer retains of them is lost, both ends exact.
	LossCentralTail LossReason = "central-tail-lost"
)

// LostRange is a gap marker in a commit record: the central positions of
// events that will never reach the centre.
type LostRange struct {
	// Reason says how they were lost.
	Reason LossReason `json:"reason"`
	// Store is the identity of the store that held them.
	Store string `json:"store,omitempty"`
	// From is the cut before the first lost event (exact), To the cut
	// after the last one; To absent means unknown: every later position
	// in From's segments and their successors at From's epoch base.
	From localstream.CutMap `json:"from"`
	To   localstream.CutMap `json:"to,omitempty"`
	// CentralSeq is the sequence of the commit record the loss was found
	// against (the chain's last record then).
	CentralSeq uint64 `json:"central_seq,omitempty"`
	// FoundAtNs is the agent's clock when the loss was found.
	FoundAtNs int64 `json:"found_at_ns"`
}

// check validates a decoded LostRange.
func (l *LostRange) check(stream string) error {
	if len(l.From) == 0 || l.Reason == "" {
		return fmt.Errorf("%w: lost range without reason or start", ErrCorruptRecord)
	}
	if _, err := l.From.Cut(stream); err != nil {
		return fmt.Errorf("%w: lost range: %w", ErrCorruptRecord, err)
	}
	if _, err := l.To.Cut(stream); err != nil {
		return fmt.Errorf("%w: lost range: %w", ErrCorruptRecord, err)
	}
	return nil
}

// String is the loss in one line (logs, /status).
func (l *LostRange) String() string {
	to := "unknown"
	if len(l.To) > 0 {
		to = fmt.Sprint(map[string]uint64(l.To))
	}
	return fmt.Sprintf("%s: events of store %s from %v to %s (central seq %d)", l.Reason, l.Store, map[string]uint64(l.From), to, l.CentralSeq)
}
