package replicate

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// packReserve is what a pack keeps free below the max payload for the
// commit record and the NATS headers of its message.
const packReserve = 8 << 10

// packTxn is a layout-2 transaction: its events are packed in memory and
// go out at Commit as one message on the cut subject (commit record and
// events together), a plain JetStream publish that expects the previous
// commit's sequence: atomic without an atomic batch, so the server's limit
// of batches in flight does not apply. Only a lone event too large to
// share a message with the commit record is sent as a two-message atomic
// batch (the part, then the commit record).
type packTxn struct {
	sink   *JetStreamSink
	stream string
	number uint64
	w      *wire.PackWriter
	// maxPayload is the central max payload when the transaction began
	// (Add's bounds; Commit reads it again).
	maxPayload int64
	n          int
	bytes      int64
	closed     bool
	// wire is what Commit handed to the connection: the pack's message(s)
	// with subject and headers (a bound: natsMsgOverhead each).
	wire int
}

// natsMsgOverhead bounds what a published message adds to its data: the
// HPUB line (subject, reply inbox, lengths) and the JetStream headers.
const natsMsgOverhead = 256

func (t *packTxn) wireBytes() int { return t.wire }

// probeWire is what the events packed so far would take on the wire.
func (t *packTxn) probeWire() int {
	return t.w.EncodedSize(t.sink.packHint(t.stream)) + natsMsgOverhead
}

func (t *packTxn) Len() int       { return t.n }
func (t *packTxn) Bytes() int64   { return t.bytes }
func (t *packTxn) Number() uint64 { return t.number }

// limit is the largest pack body of one message.
func (t *packTxn) limit() int {
	return max(int(t.maxPayload)-packReserve, 1024)
}

// fits reports whether rec still fits the transaction's one message. The
// first event always fits (it goes alone if it must).
func (t *packTxn) fits(rec *localstream.Record) bool {
	return t.n == 0 || t.w.SizeWith(rec) <= t.limit()
}

// Add packs one event; nothing is sent before Commit.
func (t *packTxn) Add(ctx context.Context, rec localstream.Record) error {
	if t.closed {
		return ErrTxnClosed
	}
	if t.n > 0 && !t.fits(&rec) {
		return fmt.Errorf("%w: event %s does not fit transaction %d", errTxnFull, rec.Position, t.number)
	}
	if mp, n := t.maxPayload, loneSize(t.w, &rec); int64(n) > mp {
		return fmt.Errorf("%w: event %s of %d bytes (payload %d) over the central max payload %d", ErrMessageTooLarge, rec.Position, n, len(rec.Payload), mp)
	}
	t.w.Add(&rec)
	t.n++
	t.bytes += int64(len(rec.Payload))
	return nil
}

// loneSize bounds the message of rec alone in a pack: its body (an upper
// bound), 64 bytes for the part's header and the pack's own overhead.
func loneSize(w *wire.PackWriter, rec *localstream.Record) int {
	n := w.SizeWith(rec) - w.Size()
	return n + 64 + wire.MaxPackOverhead(n)
}

// AddMarker packs, in place of rec, the marker that names its position
// and the reason it could not be sent (docs/central-format.md, markers).
func (t *packTxn) AddMarker(ctx context.Context, rec localstream.Record, reason string) error {
	if t.closed {
		return ErrTxnClosed
	}
	m := wire.PackMarker(rec, reason, false)
	if int64(loneSize(t.w, &m)) > t.maxPayload {
		m = wire.PackMarker(rec, reason, true)
	}
	t.w.Add(&m)
	t.n++
	return nil
}

// Commit sends the transaction, expecting prev's sequence on the cut
// subject (fencing, see the package doc, exactly once).
func (t *packTxn) Commit(ctx context.Context, prev Committed, cut localstream.StreamCut, wm watermark.Watermark, meta wire.CommitMeta) (Committed, error) {
	if t.closed {
		return Committed{}, ErrTxnClosed
	}
	t.closed = true
	now := t.sink.opts.Now().UnixNano()
	pc := &wire.PackCommit{Txn: t.number, Instance: t.sink.instance, CommittedAtNs: now,
		Events: t.n, Bytes: t.bytes, Cut: cut, Watermark: wm, Chain: meta}
	_, js, err := t.sink.link.get()
	if err != nil {
		return Committed{}, err
	}
	ctx, cancel := t.sink.link.ctx(ctx)
	defer cancel()
	data := t.w.Encode(pc, t.number, t.sink.packHint(t.stream))
	m := nats.NewMsg(wire.CutSubject(t.stream, t.sink.agent))
	m.Data = data
	t.wire = len(data) + natsMsgOverhead
	var seq uint64
	if mp := t.sink.Limits().MaxPayload; int64(len(data)+128) <= mp {
		ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(prev.Seq), jetstream.WithRetryAttempts(0))
		if err != nil {
			return Committed{}, fmt.Errorf("replicate: txn %d commit: %w", t.number, err)
		}
		seq = ack.Sequence
	} else {
		var err error
		if seq, err = t.commitSplit(ctx, js, prev, pc); err != nil {
			return Committed{}, err
		}
	}
	return Committed{Seq: seq, Record: pc.Record(t.sink.agent, t.stream)}, nil
}

// commitSplit sends the events as a part and the commit record after it,
// in one atomic batch whose first message is acked, so that a refusal
// (too many batches in flight) is read, not guessed.
func (t *packTxn) commitSplit(ctx context.Context, js jetstream.JetStream, prev Committed, pc *wire.PackCommit) (uint64, error) {
	bp, err := jetstreamext.NewBatchPublisher(js, jetstreamext.BatchFlowControl{
		AckFirst: true, AckTimeout: t.sink.opts.RequestTimeout})
	if err != nil {
		return 0, err
	}
	part := nats.NewMsg(wire.PartSubject(t.stream, t.sink.agent))
	part.Data = t.w.Encode(nil, t.number, t.sink.packHint(t.stream))
	if err := bp.AddMsg(part); err != nil {
		bp.Discard()
		return 0, fmt.Errorf("replicate: txn %d part: %w", t.number, err)
	}
	m := nats.NewMsg(wire.CutSubject(t.stream, t.sink.agent))
	m.Data = wire.NewPackWriter().Encode(pc, t.number, nil)
	ack, err := bp.CommitMsg(ctx, m, jetstreamext.WithBatchExpectLastSequencePerSubject(prev.Seq))
	if err != nil {
		return 0, fmt.Errorf("replicate: txn %d commit: %w", t.number, err)
	}
	return ack.Sequence, nil
}

// Discard abandons the transaction (nothing was sent).
func (t *packTxn) Discard() { t.closed = true }
