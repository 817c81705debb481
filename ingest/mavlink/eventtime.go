package mavlink

import "encoding/binary"

const (
	msgHeartbeat  = 0
	msgSystemTime = 2
	// bootRestartMs: a time_boot_ms this far behind the newest seen means
	// the component restarted (a reordered datagram is less behind); its
	// mapping is dropped until the next SYSTEM_TIME.
	bootRestartMs = 1_000
)

// field reads n little-endian bytes at off of a payload, zero-extended as
// MAVLink 2 truncates trailing zeros.
func field(p []byte, off, n int) uint64 {
	var b [8]byte
	if off < len(p) {
		copy(b[:n], p[off:min(len(p), off+n)])
	}
	return binary.LittleEndian.Uint64(b[:])
}

// eventTime returns f's time (Unix ns) from the drone's clock, or ok
// false when it has none yet (the caller stamps arrival, estimated):
//
//   - SYSTEM_TIME with time_unix_usec set (GPS time) is its own time, and
//     maps the component's time_boot_ms onto it;
//   - a message with a time_boot_ms field is timed through that mapping;
//   - other messages have no time of their own.
func (c *component) eventTime(f *Frame, info *msgInfo) (int64, bool) {
	if f.MsgID == msgSystemTime {
		unixUs, bootMs := field(f.Payload, 0, 8), uint32(field(f.Payload, 8, 4))
		if unixUs == 0 || unixUs > 1<<62/1000 {
			return 0, false // no GPS time yet (or nonsense)
		}
		ns := int64(unixUs) * 1000
		c.mapped, c.offsetNs, c.maxBoot = true, ns-int64(bootMs)*1e6, bootMs
		return ns, true
	}
	if info.bootMsAt < 0 || !c.mapped {
		return 0, false
	}
	bootMs := uint32(field(f.Payload, info.bootMsAt, 4))
	if int64(bootMs)+bootRestartMs < int64(c.maxBoot) {
		c.mapped = false // restarted: its boot clock starts again
		return 0, false
	}
	c.maxBoot = max(c.maxBoot, bootMs)
	return c.offsetNs + int64(bootMs)*1e6, true
}
