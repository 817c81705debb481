package video

import "time"

// ntpUnixOffset is the number of seconds from 1900-01-01 (NTP) to 1970-01-01 (Unix).
const ntpUnixOffset = 2208988800

// ntpToUnixNano converts a 64-bit NTP timestamp (seconds since 1900 in the
// high 32 bits, binary fraction in the low 32) to Unix nanoseconds. Seconds
// below 2^31 are taken to be in NTP era 1 (from 2036-02-07), per RFC 5905.
func ntpToUnixNano(ntp uint64) int64 {
	sec := int64(ntp >> 32)
	if sec < 1<<31 {
		sec += 1 << 32
	}
	frac := (ntp & 0xffffffff) * 1e9 >> 32
	return (sec-ntpUnixOffset)*1e9 + int64(frac)
}

// unixNanoToNTP is the inverse of ntpToUnixNano (for tests and the replay tool).
func unixNanoToNTP(ns int64) uint64 {
	sec := ns/1e9 + ntpUnixOffset
	frac := (uint64(ns%1e9) << 32) / 1e9
	return uint64(sec)<<32 | frac
}

// clock maps RTP timestamps of one SSRC to wall-clock Unix nanoseconds.
//
// After a Sender Report: t = ntp(SR) + int32(rtp - rtp(SR)) / rate, so the
// 32-bit RTP timestamp may wrap. Before the first SR: the arrival time of
// the first frame anchors the mapping, extrapolated with the RTP clock, and
// times are "estimated". A new mapping that disagrees with the old one by
// more than maxJump for the same RTP timestamp is a clock jump: the caller
// marks a discontinuity instead of shifting time silently.
//
// A Sender Report far from the receiving clock — its NTP time more than
// maxSkew from its arrival (an absurd value: 2^31 s, random bits, a
// spoofer's +1 h), or its mapping dating the last frame more than maxSkew
// from that frame's arrival (an RTP time off by an hour) — is ignored
// while the mapping in use is good: it dated the last frame within
// maxSkew of that frame's arrival. So one bad report, or any number,
// never moves the frames after it away from the time the good mapping
// gives them. Whether the mapping in use is good is judged by a frame it
// dated, never by the report's own RTP time (which whoever sent the
// report chose). Without a good mapping the report is used (the sender's
// clock is just off): the chunks keep the sender's time and the
// watermark tracker flags them clock-skew and bounds their marks
// (docs/design.md rule 12).
type clock struct {
	rate    int64
	maxJump int64
	// maxSkew is the receiving clock's bound; <= 0 disables the check.
	maxSkew int64

	haveSR bool
	srNs   int64
	srRTP  uint32

	haveEst bool
	estNs   int64
	estRTP  uint32

	// haveLast: lastRTP is the RTP time of the last frame dated, which
	// arrived at lastArrival (Unix ns).
	haveLast    bool
	lastRTP     uint32
	lastArrival int64
}

func newClock(rate int, maxJump, maxSkew time.Duration) *clock {
	return &clock{rate: int64(rate), maxJump: int64(maxJump), maxSkew: int64(maxSkew)}
}

// delta returns (a - b) in nanoseconds with 32-bit wrap.
func (c *clock) delta(a, b uint32) int64 { return int64(int32(a-b)) * 1e9 / c.rate }

// onSR takes a Sender Report's NTP and RTP timestamps, received at
// arrival (zero: unknown). It reports whether the new mapping jumps
// against the one in use (a discontinuity), or whether the report was
// ignored as skewed (see clock).
func (c *clock) onSR(ntp uint64, rtpTS uint32, arrival time.Time) (jump, skewed bool) {
	ns := ntpToUnixNano(ntp)
	if c.maxSkew > 0 && c.haveSR && !arrival.IsZero() && c.good(rtpTS, arrival) && c.far(ns, rtpTS, arrival) {
		return false, true
	}
	switch {
	case c.haveSR:
		jump = abs64(c.srNs+c.delta(rtpTS, c.srRTP)-ns) > c.maxJump
	case c.haveEst:
		jump = abs64(c.estNs+c.delta(rtpTS, c.estRTP)-ns) > c.maxJump
	}
	c.haveSR, c.srNs, c.srRTP = true, ns, rtpTS
	return jump, false
}

// good reports whether the sender-report mapping in use agrees with the
// receiving clock: for the last frame it dated, else (no frame yet) for a
// report with RTP time rtpTS arriving at arrival.
func (c *clock) good(rtpTS uint32, arrival time.Time) bool {
	if c.haveLast {
		return abs64(c.srNs+c.delta(c.lastRTP, c.srRTP)-c.lastArrival) <= c.maxSkew
	}
	return abs64(c.srNs+c.delta(rtpTS, c.srRTP)-arrival.UnixNano()) <= c.maxSkew
}

// far reports whether the mapping of a report (ns at rtpTS) arriving at
// arrival disagrees with the receiving clock: for the report itself, or
// for the last frame dated.
func (c *clock) far(ns int64, rtpTS uint32, arrival time.Time) bool {
	if abs64(ns-arrival.UnixNano()) > c.maxSkew {
		return true
	}
	return c.haveLast && abs64(ns+c.delta(c.lastRTP, rtpTS)-c.lastArrival) > c.maxSkew
}

// pts returns the wall-clock time of RTP timestamp ts whose frame arrived
// at arrival; estimated is true before the first SR; jump is true when the
// estimate had to be re-anchored (sender clock stalled or raced).
func (c *clock) pts(ts uint32, arrival time.Time) (ns int64, estimated, jump bool) {
	if !arrival.IsZero() {
		c.haveLast, c.lastRTP, c.lastArrival = true, ts, arrival.UnixNano()
	}
	if c.haveSR {
		return c.srNs + c.delta(ts, c.srRTP), false, false
	}
	a := arrival.UnixNano()
	if c.haveEst {
		p := c.estNs + c.delta(ts, c.estRTP)
		if abs64(p-a) <= c.maxJump {
			return p, true, false
		}
		jump = true
	}
	c.haveEst, c.estNs, c.estRTP = true, a, ts
	return a, true, jump
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
