package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
)

// TlogOptions tune a tlog replay.
type TlogOptions struct {
	// Speed scales the log's timing: 1 = original; 0 (or negative) sends
	// as fast as possible.
	Speed float64
	// Progress receives a progress bar; nil for none.
	Progress io.Writer
}

// TlogSummary says what a tlog replay sent.
type TlogSummary struct {
	// Frames sent and their Bytes (frames only).
	Frames int
	Bytes  int64
	// Span is the time from the first to the last entry in the log;
	// Elapsed is how long sending took.
	Span, Elapsed time.Duration
}

func (s TlogSummary) String() string {
	return fmt.Sprintf("%d frames, %d bytes, log span %s, sent in %s", s.Frames, s.Bytes,
		s.Span.Round(time.Millisecond), s.Elapsed.Round(time.Millisecond))
}

// SendTlog sends the frames of a tlog file (QGroundControl, MAVProxy) to
// to, with the log's timing scaled by Speed:
//
//   - udp://HOST:PORT: each frame in a datagram (a MAVLink UDP server, as
//     a GCS or the agent's mavlink.udp_listen; loss is the link's);
//   - tcp://HOST:PORT: the frames over TCP (mavlink.tcp_listen);
//   - tlog://HOST:PORT: the entries over TCP, each frame after its
//     recorded time (mavlink.tlog_listen: the agent keeps the recorded
//     times, so `export telemetry --format tlog` gives them back).
//
// A bad target wraps ErrTarget; a damaged log wraps mavlink.ErrTlog (the
// frames before the damage are sent).
func SendTlog(ctx context.Context, path, to string, opts TlogOptions) (TlogSummary, error) {
	var sum TlogSummary
	u, err := url.Parse(to)
	if err != nil || u.Host == "" || (u.Scheme != "udp" && u.Scheme != "tcp" && u.Scheme != "tlog") {
		return sum, fmt.Errorf("%w: %q: want udp://HOST:PORT, tcp://HOST:PORT or tlog://HOST:PORT", ErrTarget, to)
	}
	network := "tcp"
	if u.Scheme == "udp" {
		network = "udp"
	}
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, u.Host)
	if err != nil {
		return sum, fmt.Errorf("%w: %w", ErrTarget, err)
	}
	defer conn.Close()
	st, _ := f.Stat()
	bar := newBar(opts.Progress, int(st.Size()), "tlog")
	defer bar.Finish()
	r := mavlink.NewTlogReader(f, nil)
	var first time.Time
	start := time.Now()
	var buf []byte
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			sum.Elapsed = time.Since(start)
			return sum, err
		}
		if first.IsZero() {
			first = e.Time
		}
		if opts.Speed > 0 {
			due := start.Add(time.Duration(float64(e.Time.Sub(first)) / opts.Speed))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-ctx.Done():
					return sum, ctx.Err()
				case <-time.After(wait):
				}
			}
		} else if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		out := e.Frame
		if u.Scheme == "tlog" {
			buf = mavlink.AppendTlogEntry(buf[:0], e.Time, e.Frame)
			out = buf
		}
		if _, err := conn.Write(out); err != nil {
			sum.Elapsed = time.Since(start)
			return sum, err
		}
		sum.Frames++
		sum.Bytes += int64(len(e.Frame))
		sum.Span = e.Time.Sub(first)
		bar.Add(8 + len(e.Frame))
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.CloseWrite() // the agent reads to the end
		tc.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, tc)
	}
	sum.Elapsed = time.Since(start)
	return sum, nil
}
