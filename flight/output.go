package flight

import (
	"crypto/sha256"
	"hash"
	"io"
	"sync"
)

// output hashes a record's bytes (the file's SHA-256) and writes them to
// the caller's writer on a goroutine of its own, so that hashing and the
// file's writes run beside the merge that encodes the record. The MCAP
// writer's many small writes (record headers, message indexes, the
// summary) are gathered into buffers of outputBuffer bytes first: one
// hand-off and, into a file, one write each. At most outputBuffers
// buffers are in flight; Write blocks while they all are. The buffers
// are kept between records (outputFree).
//
// A write error is sticky: the next Write (or close) returns it. close
// must be called whatever happened (more than once is fine): it waits
// for the goroutine.
type output struct {
	w    io.Writer
	h    hash.Hash
	n    int64       // bytes written to w (the goroutine's; read after close)
	cur  []byte      // bytes gathered for the next hand-off
	full chan []byte // to the goroutine, in order
	done chan struct{}

	mu  sync.Mutex
	err error // the first write error of w
}

const (
	outputBuffer  = 256 << 10
	outputBuffers = 3
)

// outputFree holds emptied buffers of every record's output.
var outputFree = make(chan []byte, 2*outputBuffers)

func outputBuf() []byte {
	select {
	case b := <-outputFree:
		return b
	default:
		return make([]byte, 0, outputBuffer)
	}
}

func newOutput(w io.Writer) *output {
	o := &output{w: w, h: sha256.New(), cur: outputBuf(), full: make(chan []byte, outputBuffers-2), done: make(chan struct{})}
	go o.run()
	return o
}

func (o *output) run() {
	defer close(o.done)
	for b := range o.full {
		if o.failed() == nil {
			n, err := o.w.Write(b)
			o.h.Write(b[:n])
			o.n += int64(n)
			if err == nil && n < len(b) {
				err = io.ErrShortWrite
			}
			if err != nil {
				o.mu.Lock()
				o.err = err
				o.mu.Unlock()
			}
		}
		select {
		case outputFree <- b[:0]:
		default:
		}
	}
}

func (o *output) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Write gathers p; each full buffer goes to the goroutine.
func (o *output) Write(p []byte) (int, error) {
	if err := o.failed(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), outputBuffer-len(o.cur))
		o.cur = append(o.cur, p[:k]...)
		p = p[k:]
		if len(o.cur) == outputBuffer {
			o.full <- o.cur
			o.cur = outputBuf()
		}
	}
	return n, nil
}

// close hands off what is gathered, waits for the goroutine and returns
// the first write error. The SHA-256 and size are then final.
func (o *output) close() error {
	if o.full == nil {
		return o.err
	}
	if len(o.cur) > 0 && o.failed() == nil {
		o.full <- o.cur
	} else {
		select {
		case outputFree <- o.cur[:0]:
		default:
		}
	}
	o.cur = nil
	close(o.full)
	<-o.done
	o.full = nil
	return o.err
}
