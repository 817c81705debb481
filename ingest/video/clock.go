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
// A Sender Report whose NTP time is more than maxSkew from its arrival
// (an absurd value: 2^31 s, random bits) is ignored while the mapping of
// an earlier SR agrees with the arrival clock: one bad report must not
// date the chunks after it 1968 or 2104. Without such a mapping it is
// used (the sender's clock is just off): the chunks keep the sender's
// time and the watermark tracker flags them clock-skew and bounds their
// marks (docs/design.md rule 12).
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
	if c.maxSkew > 0 && c.haveSR && !arrival.IsZero() {
		a := arrival.UnixNano()
		if abs64(ns-a) > c.maxSkew && abs64(c.srNs+c.delta(rtpTS, c.srRTP)-a) <= c.maxSkew {
			return false, true
		}
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

// pts returns the wall-clock time of RTP timestamp ts whose frame arrived
// at arrival; estimated is true before the first SR; jump is true when the
// estimate had to be re-anchored (sender clock stalled or raced).
func (c *clock) pts(ts uint32, arrival time.Time) (ns int64, estimated, jump bool) {
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
