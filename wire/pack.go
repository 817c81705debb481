package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// A pack is the payload of a layout-2 central message: one transaction's
// events (or a part of them) and, in the transaction's last message, its
// commit record. The layout is docs/central-format.md, "Layout 2".
const (
	// packMagic is the first byte of every pack. A layout-1 commit record
	// is JSON and starts with '{'.
	packMagic byte = 0xE2
	// packCodecNone and packCodecZstd name how the body is stored.
	packCodecNone byte = 0
	packCodecZstd byte = 1
	// packFlagCommit: the body starts with a commit record; packFlagPart:
	// with the number of the transaction the part belongs to.
	packFlagCommit = 1
	packFlagPart   = 2
	// packFlagCommitChain: a commit record followed by its chain fields
	// (store identity, epoch base, gap marker; see resume.go).
	packFlagCommitChain = 3
	// maxPackBody bounds a decoded body: NATS caps a message at 64 MiB, and
	// a writer compresses only bodies that fit its max payload raw.
	maxPackBody = 64 << 20
)

// A pack of version 2 is codec 1 and starts its zstd stream with a
// skippable frame, the envelope, that holds the version and a CRC-32C of
// the frames after it; readers of version 1 (codec 0, or codec 1 without
// the envelope) skip it, as zstd decoders skip every skippable frame, and
// read the body as before. Bodies that do not compress travel in a stored
// zstd frame (raw blocks) instead of codec 0. docs/central-format.md,
// "Versions and the checksum".
//
//	+------+------+-------------+-------------+---------+-----------+--------------------+
//	| 0xE2 | 0x01 | 5E 2A 4D 18 | 05 00 00 00 | version | CRC-32C   | zstd frame (body)  |
//	|      |      | (skippable) | (its size)  |  (2)    | (LE, of → |  compressed/stored |
//	+------+------+-------------+-------------+---------+-----------+--------------------+
//	   0      1      2 … 5         6 … 9         10       11 … 14     15 …
const (
	packVersion        = 2
	packEnvelopeMagic  = 0x184D2A5E // a zstd skippable frame's magic (0x184D2A5?), nibble E
	packEnvelopeSize   = 5          // version byte and CRC-32C
	packEnvelopeLen    = 2 + 8 + packEnvelopeSize
	zstdFrameMagic     = 0xFD2FB528
	zstdMaxBlock       = 128 << 10
	zstdStoredFrameLen = 6 // magic, descriptor, window
)

// castagnoli is CRC-32C's table (hardware-assisted on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaxPackOverhead is the most a pack adds to a body of n bytes: the
// magic, codec, envelope and, when the body does not compress, the stored
// frame's header and block headers.
func MaxPackOverhead(n int) int {
	return packEnvelopeLen + zstdStoredFrameLen + 3*max(1, (n+zstdMaxBlock-1)/zstdMaxBlock)
}

// appendStoredFrame appends body as one zstd frame of raw blocks: the
// frame header (no content size, no checksum: the envelope's CRC covers
// it; a 128 KiB window), then blocks of at most 128 KiB, each behind its
// 3-byte header (size<<3 | type 0 (raw)<<1 | last).
func appendStoredFrame(out, body []byte) []byte {
	out = binary.LittleEndian.AppendUint32(out, zstdFrameMagic)
	out = append(out, 0x00, 0x38) // descriptor; window 1<<(10+7)
	for {
		n := min(len(body), zstdMaxBlock)
		h := uint32(n) << 3
		if n == len(body) {
			h |= 1
		}
		out = append(out, byte(h), byte(h>>8), byte(h>>16))
		out = append(out, body[:n]...)
		if body = body[n:]; len(body) == 0 && h&1 == 1 {
			return out
		}
	}
}

// storedFrameBody returns the body of a stored frame as appendStoredFrame
// writes it, without a copy when it is one block (a body of up to
// 128 KiB), else in one copy into memory that is not zeroed first; ok is
// false for any other frame (the zstd decoder reads those).
func storedFrameBody(f []byte) (body []byte, ok bool) {
	if len(f) < zstdStoredFrameLen || binary.LittleEndian.Uint32(f) != zstdFrameMagic || f[4] != 0x00 || f[5] != 0x38 {
		return nil, false
	}
	f = f[zstdStoredFrameLen:]
	var blocks [][]byte
	for {
		if len(f) < 3 {
			return nil, false
		}
		h := uint32(f[0]) | uint32(f[1])<<8 | uint32(f[2])<<16
		n := int(h >> 3)
		if h>>1&3 != 0 || n > zstdMaxBlock || n > len(f)-3 {
			return nil, false
		}
		blocks = append(blocks, f[3:3+n:3+n])
		if f = f[3+n:]; h&1 == 1 {
			break
		}
	}
	if len(f) != 0 {
		return nil, false
	}
	if len(blocks) == 1 {
		return blocks[0], true
	}
	return bytes.Join(blocks, nil), true
}

// zstdFrameLen is the length of the zstd frame that starts f (RFC 8878
// §3.1.1), from its header and block headers, without decoding it.
func zstdFrameLen(f []byte) (int, error) {
	if len(f) < 5 || binary.LittleEndian.Uint32(f) != zstdFrameMagic {
		return 0, errors.New("no zstd frame")
	}
	fhd := f[4]
	single := fhd>>5&1 == 1
	n := 5 + [4]int{0, 1, 2, 4}[fhd&3] // magic, descriptor, dictionary id
	if !single {
		n++ // window descriptor
	}
	fcs := [4]int{0, 2, 4, 8}[fhd>>6]
	if fcs == 0 && single {
		fcs = 1
	}
	n += fcs
	for {
		if len(f)-n < 3 {
			return 0, errors.New("zstd frame cut short")
		}
		h := int(f[n]) | int(f[n+1])<<8 | int(f[n+2])<<16
		size := h >> 3
		switch h >> 1 & 3 {
		case 1:
			size = 1 // RLE: one byte, repeated
		case 3:
			return 0, errors.New("zstd block of the reserved type")
		}
		if len(f)-n-3 < size {
			return 0, errors.New("zstd frame cut short")
		}
		n += 3 + size
		if h&1 == 1 {
			break
		}
	}
	if fhd>>2&1 == 1 {
		n += 4 // content checksum
	}
	if n > len(f) {
		return 0, errors.New("zstd frame cut short")
	}
	return n, nil
}

// packBodies holds encode's scratch bodies (each is copied, compressed
// or not, into the message); bodies above maxPooledBody are let go.
var packBodies = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBody = 8 << 20

// zstdEnc and zstdDec are shared: EncodeAll and DecodeAll are safe for
// concurrent use.
var (
	zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
	zstdDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(maxPackBody), zstd.WithDecoderMaxWindow(8<<20))
)

// packCommit is the binary commit record of a pack. Agent and stream are
// the message subject's.
type PackCommit struct {
	Txn           uint64
	Instance      string
	CommittedAtNs int64
	Events        int
	Bytes         int64
	Cut           localstream.StreamCut
	Watermark     watermark.Watermark
	// Chain holds the store identity, epoch base and gap marker.
	Chain CommitMeta
}

// hasChain reports whether the commit needs the chain fields.
func (c *PackCommit) hasChain() bool {
	return c.Chain.Store != "" || c.Chain.Station != "" || c.Chain.EpochBase != 0 || c.Chain.Lost != nil
}

// packWriter builds one pack body: the string table and the per-event
// metadata grow as events are added; payloads are kept aside and follow
// the metadata. It is not safe for concurrent use.
type PackWriter struct {
	strs    map[string]uint64
	table   []byte // encoded strings, in index order
	nstrs   uint64
	meta    []byte // encoded per-event metadata
	n       int
	payload [][]byte
	bytes   int // payload bytes
	// prev is the previous event's position and times (deltas).
	prevSeg, prevOff   uint64
	prevTime, prevIngs int64
}

func NewPackWriter() *PackWriter { return &PackWriter{strs: map[string]uint64{}} }

// str returns the index of s in the string table, adding it when new.
func (w *PackWriter) str(s string) uint64 {
	if i, ok := w.strs[s]; ok {
		return i
	}
	i := w.nstrs
	w.strs[s] = i
	w.nstrs++
	w.table = binary.AppendUvarint(w.table, uint64(len(s)))
	w.table = append(w.table, s...)
	return i
}

// add appends one event.
func (w *PackWriter) Add(rec *localstream.Record) {
	m := w.meta
	m = binary.AppendUvarint(m, uint64(rec.Flags))
	m = binary.AppendUvarint(m, w.str(rec.RoutingKey))
	m = binary.AppendUvarint(m, w.str(rec.Writer))
	m = binary.AppendUvarint(m, w.str(rec.ContentType))
	seg := uint64(rec.Segment)
	m = binary.AppendVarint(m, int64(seg-w.prevSeg))
	m = binary.AppendVarint(m, int64(rec.Offset-w.prevOff-1))
	m = binary.AppendVarint(m, rec.EventTime-w.prevTime)
	m = binary.AppendVarint(m, rec.IngestTime-w.prevIngs)
	m = binary.AppendUvarint(m, uint64(len(rec.Headers)))
	for _, h := range rec.Headers {
		m = binary.AppendUvarint(m, w.str(h.Key))
		m = binary.AppendUvarint(m, w.str(h.Value))
	}
	m = binary.AppendUvarint(m, uint64(len(rec.Payload)))
	w.meta = m
	w.prevSeg, w.prevOff, w.prevTime, w.prevIngs = seg, rec.Offset, rec.EventTime, rec.IngestTime
	w.payload = append(w.payload, rec.Payload)
	w.bytes += len(rec.Payload)
	w.n++
}

// size is the body's size without a commit record.
func (w *PackWriter) Size() int {
	return uvarintLen(w.nstrs) + len(w.table) + uvarintLen(uint64(w.n)) + len(w.meta) + w.bytes + 1
}

// sizeWith is the body's size after adding rec (an upper bound: strings
// already in the table are counted again).
func (w *PackWriter) SizeWith(rec *localstream.Record) int {
	n := w.Size() + 10*9 + len(rec.Payload) + len(rec.RoutingKey) + len(rec.Writer) + len(rec.ContentType) + 3*5
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value) + 2*5 + 2
	}
	return n
}

// appendCommit encodes a commit record.
func appendCommit(b []byte, c *PackCommit) []byte {
	b = binary.AppendUvarint(b, c.Txn)
	b = appendBytes(b, c.Instance)
	b = binary.AppendVarint(b, c.CommittedAtNs)
	b = binary.AppendUvarint(b, uint64(c.Events))
	b = binary.AppendUvarint(b, uint64(c.Bytes))
	b = appendCut(b, c.Cut)
	b = binary.AppendVarint(b, c.Watermark.LowerNs)
	b = binary.AppendVarint(b, c.Watermark.UpperNs)
	b = appendCut(b, c.Watermark.Cut)
	if !c.hasChain() {
		return b
	}
	b = appendBytes(b, chainStore(c.Chain.Store, c.Chain.Station))
	b = binary.AppendUvarint(b, uint64(c.Chain.EpochBase))
	if l := c.Chain.Lost; l == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = appendBytes(b, string(l.Reason))
		b = appendBytes(b, l.Store)
		b = appendCutJSON(b, l.From)
		b = appendCutJSON(b, l.To)
		b = binary.AppendUvarint(b, l.CentralSeq)
		b = binary.AppendVarint(b, l.FoundAtNs)
	}
	return b
}

// chainStore is the chain's store field: the store identity, and with a
// station "store/station". The station rides in the field that readers of
// kind 3 already take as an opaque string, so that they read the packs of
// agents that know their station (a new kind was refused by them).
func chainStore(store, station string) string {
	if station == "" {
		return store
	}
	return store + "/" + station
}

// splitChainStore undoes chainStore. Store identities and stations are hex
// (localstream, MachineStation): the last "/" is the one chainStore wrote.
func splitChainStore(s string) (store, station string) {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// appendCutJSON encodes a JSON cut like appendCut (ids are decimal keys).
func appendCutJSON(b []byte, c localstream.CutMap) []byte {
	cut, _ := c.Cut("x")
	return appendCut(b, cut)
}

// appendCut encodes a cut as its segments in ascending id order.
func appendCut(b []byte, c localstream.StreamCut) []byte {
	ids := sortedSegments(c)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(id))
		b = binary.AppendUvarint(b, c.Positions[id])
	}
	return b
}

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// packHint remembers whether one stream's packs compress. A body that
// zstd does not shrink by 1/16 is sent raw, and the attempt was wasted:
// video chunks, encrypted or random payloads do not compress, and trying
// cost ~8 % of the agent's CPU in the peers harness. After such a pack
// the next ones are sent raw without trying — 1, then 2, 4 … up to
// maxCompressSkip after each further miss — and then tried again; a pack
// that compresses ends the skipping. Bytes on the wire are those of
// trying every pack while a stream's payloads stay as they were, and at
// most maxCompressSkip packs are sent raw after they start to compress.
// Safe for concurrent use; nil tries every pack.
type PackHint struct {
	skip    atomic.Int32 // packs still to send raw without trying
	backoff atomic.Int32 // packs to skip after the next miss
}

const maxCompressSkip = 64

// try reports whether to try compressing the next pack.
func (h *PackHint) try() bool {
	if h == nil {
		return true
	}
	for {
		n := h.skip.Load()
		if n <= 0 {
			return true
		}
		if h.skip.CompareAndSwap(n, n-1) {
			return false
		}
	}
}

// skipping reports whether the next pack would be sent raw without
// trying (read only: try takes the turn).
func (h *PackHint) skipping() bool { return h != nil && h.skip.Load() > 0 }

// result records whether a tried pack compressed.
func (h *PackHint) result(compressed bool) {
	if h == nil {
		return
	}
	if compressed {
		h.backoff.Store(0)
		h.skip.Store(0)
		return
	}
	b := min(max(2*h.backoff.Load(), 1), maxCompressSkip)
	h.backoff.Store(b)
	h.skip.Store(b)
}

// zstdTries counts compression attempts (tests).
var zstdTries atomic.Uint64

// encode returns the whole pack: magic, codec and the body, compressed
// with zstd when that saves at least 1/16 of it (and hint says to try). A
// pack with a commit record ends transaction commit.Txn; one without is a
// part of transaction txn.
func (w *PackWriter) Encode(commit *PackCommit, txn uint64, hint *PackHint) []byte {
	bp := packBodies.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBody {
			packBodies.Put(bp)
		}
	}()
	body := w.appendBody(slices.Grow((*bp)[:0], w.Size()+256), commit, txn)
	defer func() { *bp = body[:0] }()
	// Room for the body as it is: an incompressible body's frame (a
	// little larger) is kept or dropped without growing out.
	out := make([]byte, packEnvelopeLen, packEnvelopeLen+len(body)+MaxPackOverhead(len(body)))
	out[0], out[1] = packMagic, packCodecZstd
	binary.LittleEndian.PutUint32(out[2:], packEnvelopeMagic)
	binary.LittleEndian.PutUint32(out[6:], packEnvelopeSize)
	out[10] = packVersion
	compressed := false
	if len(body) >= 64 && hint.try() {
		zstdTries.Add(1)
		out = zstdEnc.EncodeAll(body, out)
		compressed = len(out)-packEnvelopeLen <= len(body)-len(body)/16
		hint.result(compressed)
		if !compressed {
			out = out[:packEnvelopeLen]
		}
	}
	if !compressed {
		out = appendStoredFrame(out, body)
	}
	binary.LittleEndian.PutUint32(out[11:], crc32.Checksum(out[packEnvelopeLen:], castagnoli))
	return out
}

// appendBody appends the pack's body: the commit record (or the part's
// txn), the string table, the events' metadata and their payloads.
func (w *PackWriter) appendBody(body []byte, commit *PackCommit, txn uint64) []byte {
	if commit != nil {
		flag := byte(packFlagCommit)
		switch {
		case commit.hasChain():
			flag = packFlagCommitChain
		}
		body = append(body, flag)
		body = appendCommit(body, commit)
	} else {
		body = append(body, packFlagPart)
		body = binary.AppendUvarint(body, txn)
	}
	body = binary.AppendUvarint(body, w.nstrs)
	body = append(body, w.table...)
	body = binary.AppendUvarint(body, uint64(w.n))
	body = append(body, w.meta...)
	for _, p := range w.payload {
		body = append(body, p...)
	}
	return body
}

// EncodedSize is about what Encode would return for the events added so
// far, without a commit record: the body compressed as Encode would
// (when hint would try now) or stored. A sender that pays for bytes on
// the wire learns from it what a pack of these events costs before it
// is complete (replicate's uplink reservations); it leaves hint as it
// was. It costs one compression of the body.
func (w *PackWriter) EncodedSize(hint *PackHint) int {
	bp := packBodies.Get().(*[]byte)
	body := w.appendBody((*bp)[:0], nil, 1)
	defer func() {
		if *bp = body[:0]; cap(body) <= maxPooledBody {
			packBodies.Put(bp)
		}
	}()
	stored := len(body) + MaxPackOverhead(len(body))
	if len(body) < 64 || hint.skipping() {
		return stored
	}
	zp := packProbes.Get().(*[]byte)
	*zp = zstdEnc.EncodeAll(body, (*zp)[:0])
	n := packEnvelopeLen + len(*zp)
	if cap(*zp) <= maxPooledBody {
		packProbes.Put(zp)
	}
	return min(n, stored)
}

// packProbes holds EncodedSize's compression buffers.
var packProbes = sync.Pool{New: func() any { return new([]byte) }}

// isPack tells a layout-2 message from a layout-1 commit record.
func isPack(b []byte) bool { return len(b) > 0 && b[0] == packMagic }

// decodedPack is a decoded pack: its events in order and, when it ends a
// transaction, its commit record.
type decodedPack struct {
	// version is the pack's version (1: before the checksum), codec its
	// second byte, kind the body's first field.
	version int
	codec   byte
	kind    uint64
	commit  *PackCommit
	// txn is the transaction the events belong to.
	txn    uint64
	events []localstream.Record
}

// decodePack decodes a pack of the named stream. Every count and length
// is checked against the bytes left, so corrupt input is an error, never
// a panic or an allocation beyond the message's size.
func decodePack(stream string, b []byte) (decodedPack, error) {
	version, body, err := openPack(b)
	if err != nil {
		return decodedPack{}, err
	}
	d := packDecoder{b: body}
	out := decodedPack{version: version, codec: b[1]}
	out.kind = d.uvarint()
	switch kind := out.kind; kind {
	case packFlagCommit, packFlagCommitChain:
		c := d.commit(stream)
		if d.err == nil && kind != packFlagCommit {
			d.chain(stream, &c)
		}
		out.commit, out.txn = &c, c.Txn
	case packFlagPart:
		if out.txn = d.uvarint(); out.txn == 0 {
			d.fail("part's txn")
		}
	default:
		return decodedPack{}, fmt.Errorf("%w: pack kind %d", ErrCorruptRecord, kind)
	}
	nstrs := d.count(1)
	strs := make([]string, 0, nstrs)
	for range nstrs {
		strs = append(strs, d.str())
	}
	n := d.count(10)
	if d.err != nil {
		return decodedPack{}, d.err
	}
	str := func(i uint64) string {
		if i >= uint64(len(strs)) {
			d.fail("string index")
			return ""
		}
		return strs[i]
	}
	out.events = make([]localstream.Record, 0, n)
	lens := make([]uint64, 0, n)
	var seg, off uint64
	var et, it int64
	for range n {
		var r localstream.Record
		fl := d.uvarint()
		if fl > math.MaxUint16 {
			d.fail("flags")
		}
		r.Flags = localstream.Flags(fl)
		r.RoutingKey = str(d.uvarint())
		r.Writer = str(d.uvarint())
		r.ContentType = str(d.uvarint())
		seg += uint64(d.varint())
		off += uint64(d.varint()) + 1
		et += d.varint()
		it += d.varint()
		r.Segment, r.Offset, r.EventTime, r.IngestTime = localstream.SegmentID(seg), off, et, it
		nh := d.count(2)
		for range nh {
			k := str(d.uvarint())
			v := str(d.uvarint())
			r.Headers = append(r.Headers, localstream.Header{Key: k, Value: v})
		}
		lens = append(lens, d.uvarint())
		if r.Flags.Has(packEventDropped) && (len(r.Headers) != 1 || r.Headers[0].Key != packDroppedKey || lens[len(lens)-1] != 0) {
			d.fail("marker (one header, dropped, and no payload)")
		}
		if d.err != nil {
			return decodedPack{}, d.err
		}
		out.events = append(out.events, r)
	}
	for i, l := range lens {
		if l > uint64(len(d.b)) {
			return decodedPack{}, fmt.Errorf("%w: pack payload of %d bytes, %d left", ErrCorruptRecord, l, len(d.b))
		}
		if l > 0 {
			out.events[i].Payload = d.b[:l:l]
		}
		d.b = d.b[l:]
	}
	if len(d.b) != 0 {
		return decodedPack{}, fmt.Errorf("%w: pack has %d trailing bytes", ErrCorruptRecord, len(d.b))
	}
	return out, nil
}

// openPack checks a pack's magic, codec and, from version 2, its
// envelope and checksum, and returns its version and body.
func openPack(b []byte) (version int, body []byte, err error) {
	if len(b) < 2 || b[0] != packMagic {
		return 0, nil, fmt.Errorf("%w: not a pack", ErrCorruptRecord)
	}
	switch b[1] {
	case packCodecNone:
		return 1, b[2:], nil
	case packCodecZstd:
	default:
		return 0, nil, fmt.Errorf("%w: pack codec %d", ErrCorruptRecord, b[1])
	}
	frames, version := b[2:], 1
	if len(frames) >= 4 && binary.LittleEndian.Uint32(frames)&^0xF == packEnvelopeMagic&^0xF {
		// Version 1 packs have no skippable frame: one that is not the
		// envelope is a changed envelope, not to be skipped.
		if len(frames) < 8+packEnvelopeSize || binary.LittleEndian.Uint32(frames) != packEnvelopeMagic {
			return 0, nil, fmt.Errorf("%w: pack envelope damaged (% x)", ErrCorruptRecord, frames[:min(len(frames), 8)])
		}
		if version = int(frames[8]); version != packVersion {
			return 0, nil, fmt.Errorf("%w: pack version %d (this reader knows 1 and 2)", ErrCorruptRecord, version)
		}
		if size := binary.LittleEndian.Uint32(frames[4:]); size != packEnvelopeSize {
			return 0, nil, fmt.Errorf("%w: pack envelope of %d bytes, version 2 has %d", ErrCorruptRecord, size, packEnvelopeSize)
		}
		want := binary.LittleEndian.Uint32(frames[9:])
		frames = frames[8+packEnvelopeSize:]
		if got := crc32.Checksum(frames, castagnoli); got != want {
			return 0, nil, fmt.Errorf("%w: stored %08x, computed %08x over %d bytes", ErrPackChecksum, want, got, len(frames))
		}
	}
	// One zstd frame and nothing after it: a second frame (zstd libraries
	// would decode it too and join the bodies) is refused.
	if n, err := zstdFrameLen(frames); err != nil {
		return 0, nil, fmt.Errorf("%w: pack: %v", ErrCorruptRecord, err)
	} else if n != len(frames) {
		return 0, nil, fmt.Errorf("%w: pack: %d bytes after its zstd frame", ErrCorruptRecord, len(frames)-n)
	}
	if body, ok := storedFrameBody(frames); ok {
		return version, body, nil
	}
	if body, err = zstdDec.DecodeAll(frames, nil); err != nil {
		return 0, nil, fmt.Errorf("%w: pack: %v", ErrCorruptRecord, err)
	}
	return version, body, nil
}

// packDecoder reads varints and strings; the first error sticks.
type packDecoder struct {
	b   []byte
	err error
}

func (d *packDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: pack: bad %s", ErrCorruptRecord, what)
	}
}

func (d *packDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *packDecoder) varint() int64 {
	u := d.uvarint() // zigzag, as binary.AppendVarint writes it
	return int64(u>>1) ^ -int64(u&1)
}

// count reads a count of items each at least min bytes long.
func (d *packDecoder) count(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/min) {
		d.fail("count")
		return 0
	}
	return int(n)
}

func (d *packDecoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *packDecoder) cut(stream string) localstream.StreamCut {
	n := d.count(2)
	c := localstream.StreamCut{Stream: stream}
	if n == 0 {
		return c
	}
	c.Positions = make(map[localstream.SegmentID]uint64, n)
	for range n {
		id := localstream.SegmentID(d.uvarint())
		if _, dup := c.Positions[id]; dup {
			d.fail("cut (segment twice)")
		}
		c.Positions[id] = d.uvarint()
	}
	return c
}

func (d *packDecoder) commit(stream string) PackCommit {
	var c PackCommit
	c.Txn = d.uvarint()
	c.Instance = d.str()
	c.CommittedAtNs = d.varint()
	c.Events = int(min(d.uvarint(), math.MaxInt32))
	c.Bytes = int64(min(d.uvarint(), math.MaxInt64))
	c.Cut = d.cut(stream)
	c.Watermark.LowerNs = d.varint()
	c.Watermark.UpperNs = d.varint()
	c.Watermark.Cut = d.cut(stream)
	if d.err == nil && (c.Txn == 0 || len(c.Cut.Positions) == 0) {
		d.fail("commit record (no txn or cut)")
	}
	return c
}

// chain reads a commit's chain fields.
func (d *packDecoder) chain(stream string, c *PackCommit) {
	c.Chain.Store, c.Chain.Station = splitChainStore(d.str())
	if b := d.uvarint(); b > math.MaxUint32 {
		d.fail("epoch base")
	} else {
		c.Chain.EpochBase = uint32(b)
	}
	switch d.uvarint() {
	case 0:
		return
	case 1:
	default:
		d.fail("lost flag")
		return
	}
	l := &LostRange{Reason: LossReason(d.str()), Store: d.str()}
	l.From = d.cut(stream).Map()
	l.To = d.cut(stream).Map()
	l.CentralSeq = d.uvarint()
	l.FoundAtNs = d.varint()
	if d.err == nil {
		if err := l.check(stream); err != nil {
			d.fail("lost range")
			return
		}
	}
	c.Chain.Lost = l
}

// record converts the binary commit to the public CommitRecord.
func (c *PackCommit) Record(agent, stream string) CommitRecord {
	return NewCommitRecord(agent, stream, c.Instance, c.Txn, c.Cut, c.Watermark, c.Chain, c.Events, c.Bytes, c.CommittedAtNs)
}

// sortedSegments returns a cut's segment ids in ascending order.
func sortedSegments(c localstream.StreamCut) []localstream.SegmentID {
	ids := make([]localstream.SegmentID, 0, len(c.Positions))
	for id := range c.Positions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
