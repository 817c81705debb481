package localstream

import "encoding/binary"

// Key prefixes. Data keys sort so that one segment's events are one
// contiguous range in offset order.
const (
	prefixData    = 'd' // d | len(stream) u8 | stream | segment u64 BE | offset u64 BE
	prefixStream  = 's' // s | stream                     → stream metadata (JSON)
	prefixCut     = 'c' // c | len(stream) u8 | stream | sink → committed cut (binary)
	prefixMeta    = 'x' // x | user key                   → PutMeta values
	prefixReclaim = 'z' // z                            → written and dropped by Reclaim (never kept)
)

func segmentPrefix(stream string, seg SegmentID) []byte {
	return appendSegmentPrefix(make([]byte, 0, 2+len(stream)+8), stream, seg)
}

// dataKey is one allocation (an append's key: once per event).
func dataKey(stream string, seg SegmentID, off uint64) []byte {
	b := appendSegmentPrefix(make([]byte, 0, 2+len(stream)+16), stream, seg)
	return binary.BigEndian.AppendUint64(b, off)
}

func appendSegmentPrefix(b []byte, stream string, seg SegmentID) []byte {
	b = append(b, prefixData, byte(len(stream)))
	b = append(b, stream...)
	return binary.BigEndian.AppendUint64(b, uint64(seg))
}

// offsetOf returns the offset encoded in the last 8 bytes of a data key.
func offsetOf(key []byte) uint64 { return binary.BigEndian.Uint64(key[len(key)-8:]) }

func streamKey(stream string) []byte { return append([]byte{prefixStream}, stream...) }

func cutKey(stream, sink string) []byte {
	b := append([]byte{prefixCut, byte(len(stream))}, stream...)
	return append(b, sink...)
}

func cutPrefix(stream string) []byte {
	return append([]byte{prefixCut, byte(len(stream))}, stream...)
}

func metaKey(k string) []byte { return append([]byte{prefixMeta}, k...) }
