package flight

import (
	"sync"

	"github.com/foxglove/mcap/go/mcap"
)

// A record's MCAP writer runs on a goroutine of its own (recordWriter.run)
// so that what it does per message — copy the message into the chunk,
// CRC-32 it, compress the chunk when it is full — runs beside the merge
// that encodes the messages, as the file's SHA-256 runs beside both
// (output). The merge gathers schemas, channels and messages into a
// writeBatch, each message's bytes appended to the batch's data (the
// encoders append there directly: a video message is copied once from
// the read's access unit), and hands a batch off when it holds
// batchBytes. At most batchesInFlight batches are queued; the merge
// blocks while they all are. Batches are kept between records
// (batchFree).
//
//	readers ──▶ merge ──batches──▶ MCAP writer ──256 KiB──▶ output
//	(fetch,     (entries,           (records, CRC,          (file SHA-256,
//	 decode,     chain, video,       zstd chunks,            writes)
//	 payload     positions)          indexes)
//	 SHA-256)
type writeBatch struct {
	ops  []writeOp
	data []byte // the messages' bytes, back to back
}

// writeOp is one record for the MCAP writer: a schema, a channel, or a
// message whose data is batch.data[from:to].
type writeOp struct {
	schema   *mcap.Schema
	channel  *mcap.Channel
	msg      mcap.Message
	from, to int
}

const (
	batchBytes      = 128 << 10
	batchesInFlight = 2
)

// batchFree holds emptied batches of every record's writer.
var batchFree = make(chan *writeBatch, 2*(batchesInFlight+2))

func getBatch() *writeBatch {
	select {
	case b := <-batchFree:
		return b
	default:
		return &writeBatch{data: make([]byte, 0, batchBytes+batchBytes/4)}
	}
}

// putBatch keeps b for another record, unless one large access unit grew
// it far past a batch.
func putBatch(b *writeBatch) {
	if cap(b.data) > 8*batchBytes {
		return
	}
	clear(b.ops) // no schema or channel kept alive
	b.ops, b.data = b.ops[:0], b.data[:0]
	select {
	case batchFree <- b:
	default:
	}
}

// recordPipe is the hand-off between the merge and the writer goroutine.
type recordPipe struct {
	cur  *writeBatch      // the batch the merge is filling
	full chan *writeBatch // to the goroutine, in order
	done chan struct{}    // closed when the goroutine has returned

	mu  sync.Mutex
	err error // the MCAP writer's first error (sticky)
}

func (p *recordPipe) start(w *mcap.Writer) {
	p.cur = getBatch()
	p.full = make(chan *writeBatch, batchesInFlight)
	p.done = make(chan struct{})
	go p.run(w)
}

// run writes every batch it is handed, in order, until the merge closes
// the hand-off. After an error it drops the batches.
func (p *recordPipe) run(w *mcap.Writer) {
	defer close(p.done)
	for b := range p.full {
		if p.failed() == nil {
			if err := apply(w, b); err != nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
			}
		}
		putBatch(b)
	}
}

func apply(w *mcap.Writer, b *writeBatch) error {
	for i := range b.ops {
		op := &b.ops[i]
		var err error
		switch {
		case op.schema != nil:
			err = w.WriteSchema(op.schema)
		case op.channel != nil:
			err = w.WriteChannel(op.channel)
		default:
			op.msg.Data = b.data[op.from:op.to]
			err = w.WriteMessage(&op.msg)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *recordPipe) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// add queues op; a full batch goes to the goroutine.
func (p *recordPipe) add(op writeOp) error {
	p.cur.ops = append(p.cur.ops, op)
	if len(p.cur.data) < batchBytes {
		return nil
	}
	if err := p.failed(); err != nil {
		return err
	}
	p.full <- p.cur
	p.cur = getBatch()
	return nil
}

// stop hands off what is gathered (unless the record is abandoned), waits
// for the goroutine and returns the writer's first error. After it, the
// MCAP writer is the caller's again. More than once is fine.
func (p *recordPipe) stop(abandon bool) error {
	if p.full == nil {
		return p.err
	}
	if abandon || len(p.cur.ops) == 0 {
		putBatch(p.cur)
	} else {
		p.full <- p.cur
	}
	p.cur = nil
	close(p.full)
	<-p.done
	p.full = nil
	return p.err
}
