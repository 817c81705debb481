package localstream

import (
	"fmt"
	"hash/fnv"
	"math"
)

// SegmentID identifies a segment: epoch<<32 | number. The epoch is the scale
// generation in which the segment was created; the number is unique within
// the stream.
type SegmentID uint64

// NewSegmentID builds an id from its epoch and number.
func NewSegmentID(epoch, number uint32) SegmentID {
	return SegmentID(uint64(epoch)<<32 | uint64(number))
}

// Epoch returns the scale generation that created the segment.
func (s SegmentID) Epoch() uint32 { return uint32(s >> 32) }

// Number returns the segment's number, unique in its stream.
func (s SegmentID) Number() uint32 { return uint32(s) }

// String renders "epoch.number", the form used in cuts' text and logs.
func (s SegmentID) String() string { return fmt.Sprintf("%d.%d", s.Epoch(), s.Number()) }

// KeyRange is a half-open range [Low, High) of the routing-key hash space [0, 1).
type KeyRange struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// Contains reports whether h lies in [Low, High).
func (r KeyRange) Contains(h float64) bool { return h >= r.Low && h < r.High }

// Overlaps reports whether the two ranges share any point.
func (r KeyRange) Overlaps(o KeyRange) bool { return r.Low < o.High && o.Low < r.High }

// String renders "[low,high)".
func (r KeyRange) String() string { return fmt.Sprintf("[%g,%g)", r.Low, r.High) }

// KeyHash maps a routing key into [0, 1). It is FNV-1a 64 of the key's
// bytes, mixed by the MurmurHash3 64-bit finalizer (fmix64) — FNV alone
// leaves keys that differ in their last byte, such as drone-1 and drone-2,
// next to each other, so no split could separate them — then its top 53
// bits divided by 2^53. It is part of the on-disk contract: changing it
// would move keys between segments of existing streams.
func KeyHash(routingKey string) float64 {
	h := fnv.New64a()
	h.Write([]byte(routingKey))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return float64(x>>11) / float64(uint64(1)<<53)
}

// SplitRange divides r into n equal parts. The boundaries are computed once
// so that adjacent parts share the exact same float.
func SplitRange(r KeyRange, n int) []KeyRange {
	if n < 1 {
		n = 1
	}
	out := make([]KeyRange, n)
	lo := r.Low
	for i := range n {
		hi := r.High
		if i < n-1 {
			hi = r.Low + (r.High-r.Low)*float64(i+1)/float64(n)
		}
		out[i] = KeyRange{Low: lo, High: hi}
		lo = hi
	}
	return out
}

// Segment describes one segment of a stream.
type Segment struct {
	// ID is epoch<<32 | number.
	ID SegmentID `json:"id"`
	// Range is the part of the key space the segment owns.
	Range KeyRange `json:"range"`
	// Sealed is true once a scale replaced the segment; no event is appended after.
	Sealed bool `json:"sealed"`
	// Predecessors are the segments this one replaced (empty in epoch 0).
	Predecessors []SegmentID `json:"predecessors,omitempty"`
	// Successors are the segments that replaced this one (set when sealed).
	Successors []SegmentID `json:"successors,omitempty"`
	// Length is the number of durable events (the next offset).
	Length uint64 `json:"length"`
	// Start is the first offset still stored (retention truncates below it).
	Start uint64 `json:"start"`
	// Bytes is the payload bytes of the segment's Length events (for
	// status and a backlog's bytes): counted as they are appended; at
	// open, the mean of its last stored events times Length.
	Bytes uint64 `json:"bytes"`
}

func validRange(r KeyRange) bool {
	return r.Low >= 0 && r.High <= 1 && r.Low < r.High && !math.IsNaN(r.Low) && !math.IsNaN(r.High)
}
