package flight

import (
	"context"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/wire"
)

// aheadDepth is how many events a stream's reader may hold ready before
// the merge takes them: enough to hide a fetch's round trip (centralread
// fetches 512 messages at a time), little memory (video events are a
// few access units each).
const aheadDepth = 64

// ahead is one event read ahead by a stream's reader goroutine: next's
// results and the loss records the stream held then (the merge turns
// them into gaps in the same place as a read in line would).
type ahead struct {
	it   centralread.Item
	prep prepared // what it becomes
	err  error
	lost []wire.LostRange
}

// readAhead starts s's reader goroutine: it calls next until io.EOF or an
// error (sent last) or until stop. Only that goroutine touches s until it
// has sent its last item; the merge reads s after receiving it.
func (s *streamRead) readAhead(ctx context.Context) {
	s.ahead = make(chan ahead, aheadDepth)
	s.stop = make(chan struct{})
	s.exited = make(chan struct{})
	go func() {
		defer close(s.exited)
		for {
			it, err := s.next(ctx)
			var prep prepared
			if err == nil {
				prep, err = s.prepare(&it)
			}
			// After the first event s.lost only grows: the elements
			// below its length now stay as they are.
			a := ahead{it: it, prep: prep, err: err, lost: s.lost[:len(s.lost):len(s.lost)]}
			select {
			case s.ahead <- a:
			case <-s.stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
}

// take returns the stream's next event read ahead.
func (s *streamRead) take(ctx context.Context) (ahead, error) {
	select {
	case a := <-s.ahead:
		return a, nil
	case <-ctx.Done():
		return ahead{}, ctx.Err()
	}
}

// stopAhead ends the reader goroutine and waits for it.
func (s *streamRead) stopAhead() {
	if s.stop == nil {
		return
	}
	close(s.stop)
	<-s.exited
	s.stop = nil
}
