package replay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Options tune a replay.
type Options struct {
	// Speed scales the capture's timing: 1 = original, 2 = twice as fast;
	// 0 (or negative) sends as fast as possible.
	Speed float64
	// SSRC, when non-zero, replaces the SSRC of every RTP packet and the
	// sender SSRC of every RTCP packet, so one capture can act as a
	// different drone.
	SSRC uint32
	// Mux sends RTCP to the RTP port (RFC 5761) even if the capture had
	// it on port+1.
	Mux bool
	// LocalAddr is the source "ip:port" to send from; default any.
	LocalAddr string
	// Live shifts the NTP time of every RTCP sender report by the time
	// between the capture and its replay, so that the drone's wall clock
	// reads "now": the replay acts as a live drone, not as a recording of
	// when the capture was made. Meant for Speed 1 (at other speeds the
	// reports' clock and the RTP timestamps no longer agree).
	Live bool
	// Progress receives a progress bar; nil for none.
	Progress io.Writer
}

// Summary says what a replay sent.
type Summary struct {
	// Packets sent, of which RTP and RTCP; Bytes of UDP payload.
	Packets, RTP, RTCP int
	Bytes              int64
	// Skipped are capture records not sent (not UDP, other ports, not RTP/RTCP).
	Skipped int
	// SSRCs are the distinct SSRCs sent (after rewriting), sorted.
	SSRCs []uint32
	// CaptureSpan is the time from the first to the last packet sent, in
	// the capture; Elapsed is how long sending took.
	CaptureSpan, Elapsed time.Duration
	// RTPPort is the capture's RTP destination port; RTCPMuxed is true when
	// the capture had RTCP on that port.
	RTPPort   uint16
	RTCPMuxed bool
}

// String renders the summary on one line.
func (s Summary) String() string {
	return fmt.Sprintf("sent %d packets (%d rtp, %d rtcp, %d bytes) of ssrc %s in %s (capture span %s); skipped %d",
		s.Packets, s.RTP, s.RTCP, s.Bytes, ssrcList(s.SSRCs), s.Elapsed.Round(time.Millisecond),
		s.CaptureSpan.Round(time.Millisecond), s.Skipped)
}

func ssrcList(ss []uint32) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%08x", s)
	}
	return out
}

// Select keeps the RTP stream of a capture and its RTCP: the UDP
// destination port with the most RTP, RTCP to that port (muxed) or to
// port+1. It returns the kept packets, the RTP port and the number dropped.
func Select(pkts []Packet) (kept []Packet, rtpPort uint16, dropped int) {
	count := map[uint16]int{}
	for _, p := range pkts {
		if p.Kind == RTP {
			count[p.Dst.Port()]++
		}
	}
	best := -1
	for port, n := range count {
		if n > best || (n == best && port < rtpPort) {
			rtpPort, best = port, n
		}
	}
	for _, p := range pkts {
		port := p.Dst.Port()
		switch {
		case p.Kind == RTP && port == rtpPort,
			p.Kind == RTCP && (port == rtpPort || port == rtpPort+1):
			kept = append(kept, p)
		default:
			dropped++
		}
	}
	return kept, rtpPort, dropped
}

// Send replays the capture file to the agent at to ("host:port", the RTP port).
func Send(ctx context.Context, file, to string, opts Options) (Summary, error) {
	all, skipped, err := ReadFile(file)
	if err != nil {
		return Summary{}, err
	}
	pkts, port, dropped := Select(all)
	if len(pkts) == 0 {
		return Summary{}, fmt.Errorf("%w: %s", ErrNoRTP, file)
	}
	s, err := SendPackets(ctx, pkts, port, to, opts)
	s.Skipped += skipped + dropped
	return s, err
}

// SendPackets sends pkts (as from Select, in capture order) to the agent at
// to: RTP to its port, RTCP to port+1 when the capture had it on
// rtpPort+1 (or to the RTP port with Options.Mux). Packets are copied
// before the SSRC is rewritten. It stops early, with ctx's error, when ctx ends.
func SendPackets(ctx context.Context, pkts []Packet, rtpPort uint16, to string, opts Options) (Summary, error) {
	s := Summary{RTPPort: rtpPort, RTCPMuxed: true}
	dst, err := netip.ParseAddrPort(to)
	if err != nil {
		ua, rerr := net.ResolveUDPAddr("udp", to)
		if rerr != nil || ua.Port == 0 {
			return s, fmt.Errorf("%w: %q: want host:port", ErrTarget, to)
		}
		dst = ua.AddrPort()
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	dstRTCP := netip.AddrPortFrom(dst.Addr(), dst.Port()+1)
	var laddr *net.UDPAddr
	if opts.LocalAddr != "" {
		if laddr, err = net.ResolveUDPAddr("udp", opts.LocalAddr); err != nil {
			return s, fmt.Errorf("%w: local address %q: %v", ErrTarget, opts.LocalAddr, err)
		}
	}
	network := "udp4"
	if dst.Addr().Is6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, laddr)
	if err != nil {
		return s, fmt.Errorf("replay: %w", err)
	}
	defer conn.Close()
	_ = conn.SetWriteBuffer(4 << 20)

	var bar *progressbar.ProgressBar
	if opts.Progress != nil {
		bar = progressbar.NewOptions(len(pkts),
			progressbar.OptionSetWriter(opts.Progress),
			progressbar.OptionSetDescription("replay"),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(opts.Progress) }))
	}
	ssrcs := map[uint32]bool{}
	start := time.Now()
	var t0 time.Time
	buf := make([]byte, 0, 65536)
	for i, p := range pkts {
		if i == 0 {
			t0 = p.Time
		}
		if opts.Speed > 0 {
			due := start.Add(time.Duration(float64(p.Time.Sub(t0)) / opts.Speed))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return finish(s, ssrcs, start, bar), ctx.Err()
				case <-time.After(d):
				}
			}
		} else if ctx.Err() != nil {
			return finish(s, ssrcs, start, bar), ctx.Err()
		}
		buf = append(buf[:0], p.Payload...)
		target := dst
		switch p.Kind {
		case RTP:
			if opts.SSRC != 0 {
				binary.BigEndian.PutUint32(buf[8:12], opts.SSRC)
			}
			ssrcs[binary.BigEndian.Uint32(buf[8:12])] = true
			s.RTP++
		case RTCP:
			rewriteRTCP(buf, opts.SSRC)
			if opts.Live {
				shiftSenderReports(buf, time.Since(p.Time))
			}
			if p.Dst.Port() != rtpPort {
				s.RTCPMuxed = false
				if !opts.Mux {
					target = dstRTCP
				}
			}
			s.RTCP++
		}
		if _, err := conn.WriteToUDPAddrPort(buf, target); err != nil {
			// ECONNREFUSED from an earlier ICMP: the agent is not (yet) there.
			if !isRefused(err) {
				return finish(s, ssrcs, start, bar), fmt.Errorf("replay: send: %w", err)
			}
		}
		s.Packets++
		s.Bytes += int64(len(buf))
		s.CaptureSpan = p.Time.Sub(t0)
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return finish(s, ssrcs, start, nil), nil
}

func finish(s Summary, ssrcs map[uint32]bool, start time.Time, bar *progressbar.ProgressBar) Summary {
	if bar != nil {
		_ = bar.Exit()
	}
	s.Elapsed = time.Since(start)
	for k := range ssrcs {
		s.SSRCs = append(s.SSRCs, k)
	}
	sort.Slice(s.SSRCs, func(i, j int) bool { return s.SSRCs[i] < s.SSRCs[j] })
	return s
}

// rewriteRTCP replaces the sender SSRC of each packet of a compound RTCP
// packet (bytes 4-7 of every SR, RR, SDES chunk 1, BYE source 1).
func rewriteRTCP(b []byte, ssrc uint32) {
	if ssrc == 0 {
		return
	}
	for len(b) >= 8 {
		n := (int(binary.BigEndian.Uint16(b[2:4])) + 1) * 4
		if b[0]&0x1f > 0 || b[1] == 200 || b[1] == 201 {
			binary.BigEndian.PutUint32(b[4:8], ssrc)
		}
		if n > len(b) {
			return
		}
		b = b[n:]
	}
}

// shiftSenderReports adds d to the NTP timestamp (64-bit, 32.32 fixed
// point) of every sender report in a compound RTCP packet.
func shiftSenderReports(b []byte, d time.Duration) {
	ns := d.Nanoseconds()
	delta := uint64((ns/1e9)<<32) + uint64((ns%1e9)<<32/1e9) // two's complement when d < 0
	for len(b) >= 16 {
		n := (int(binary.BigEndian.Uint16(b[2:4])) + 1) * 4
		if b[1] == 200 && n >= 16 && n <= len(b) {
			binary.BigEndian.PutUint64(b[8:16], binary.BigEndian.Uint64(b[8:16])+delta)
		}
		if n > len(b) {
			return
		}
		b = b[n:]
	}
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
