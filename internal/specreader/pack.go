package specreader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Pack is a decoded pack in the golden-vector JSON form of
// docs/central-format.md ("Golden vectors").
type Pack struct {
	Subject string  `json:"subject"`
	Version int     `json:"version"`
	Codec   int     `json:"codec"`
	Kind    uint64  `json:"kind"`
	Txn     uint64  `json:"txn"`
	Commit  *Commit `json:"commit"`
	Events  []Event `json:"events"`
}

// Commit is a commit record.
type Commit struct {
	Agent         string            `json:"agent"`
	Stream        string            `json:"stream"`
	Txn           uint64            `json:"txn"`
	Instance      string            `json:"instance"`
	Store         string            `json:"store"`
	Station       string            `json:"station"`
	EpochBase     uint64            `json:"epoch_base"`
	Cut           map[string]uint64 `json:"cut"`
	Watermark     Watermark         `json:"watermark"`
	Events        uint64            `json:"events"`
	Bytes         uint64            `json:"bytes"`
	CommittedAtNs int64             `json:"committed_at_ns"`
	Lost          *Lost             `json:"lost"`
}

// Watermark is a commit record's committed watermark.
type Watermark struct {
	LowerNs int64             `json:"lower_ns"`
	UpperNs int64             `json:"upper_ns"`
	Cut     map[string]uint64 `json:"cut"`
}

// Lost is a gap marker.
type Lost struct {
	Reason     string            `json:"reason"`
	Store      string            `json:"store"`
	From       map[string]uint64 `json:"from"`
	To         map[string]uint64 `json:"to"`
	CentralSeq uint64            `json:"central_seq"`
	FoundAtNs  int64             `json:"found_at_ns"`
}

// Event is one event of a pack.
type Event struct {
	Segment      uint64      `json:"segment"`
	Offset       uint64      `json:"offset"`
	Flags        uint64      `json:"flags"`
	RoutingKey   string      `json:"routing_key"`
	Writer       string      `json:"writer"`
	ContentType  string      `json:"content_type"`
	EventTimeNs  int64       `json:"event_time_ns"`
	IngestTimeNs int64       `json:"ingest_time_ns"`
	Headers      [][2]string `json:"headers"`
	Payload      []byte      `json:"payload"`
	Dropped      string      `json:"dropped"`
}

// ErrChecksum: a version-2 pack's CRC-32C does not match.
var ErrChecksum = errors.New("specreader: pack checksum mismatch")

const (
	magic          = 0xE2
	envelopeMagic  = 0x184D2A5E
	markerBit      = 1 << 15
	maxBody        = 64 << 20
	kindCommit     = 1
	kindPart       = 2
	kindChain      = 3
	minEventBytes  = 10
	minHeaderBytes = 2
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	zdec, _    = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxBody))
)

// Decode reads a layout-2 message: its subject
// (edge.<stream>.<agent>.cut or .part) and its payload.
func Decode(subject string, data []byte) (*Pack, error) { return decode(subject, data, open) }

// decode reads a message with opener to check the pack and get its body.
func decode(subject string, data []byte, opener func(*Pack, []byte) ([]byte, error)) (*Pack, error) {
	toks := strings.Split(subject, ".")
	if len(toks) != 4 || toks[0] != "edge" || (toks[3] != "cut" && toks[3] != "part") {
		return nil, fmt.Errorf("specreader: subject %q is no pack subject", subject)
	}
	agent, err := unescapeToken(toks[2])
	if err != nil {
		return nil, err
	}
	p := &Pack{Subject: subject, Events: []Event{}}
	body, err := opener(p, data)
	if err != nil {
		return nil, err
	}
	r := &reader{b: body}
	p.Kind = r.uvarint()
	switch p.Kind {
	case kindCommit, kindChain:
		if toks[3] != "cut" {
			return nil, fmt.Errorf("specreader: a commit record on %q", subject)
		}
		p.Commit = r.commit(p.Kind == kindChain)
		p.Commit.Agent, p.Commit.Stream = agent, toks[1]
		p.Txn = p.Commit.Txn
	case kindPart:
		if toks[3] != "part" {
			return nil, fmt.Errorf("specreader: a part on %q", subject)
		}
		if p.Txn = r.uvarint(); p.Txn == 0 && r.err == nil {
			r.fail("part of txn 0")
		}
	default:
		if r.err == nil {
			return nil, fmt.Errorf("specreader: kind %d", p.Kind)
		}
	}
	r.events(p)
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
}

// open checks the magic, codec, envelope and checksum and returns the
// body ("Layout 2", "Versions and the checksum").
func open(p *Pack, data []byte) ([]byte, error) {
	if len(data) < 2 || data[0] != magic {
		return nil, errors.New("specreader: not a pack (first byte not 0xE2)")
	}
	p.Codec, p.Version = int(data[1]), 1
	rest := data[2:]
	switch p.Codec {
	case 0:
		return rest, nil
	case 1:
	default:
		return nil, fmt.Errorf("specreader: codec %d", p.Codec)
	}
	if len(rest) >= 4 && rest[1] == 0x2A && rest[2] == 0x4D && rest[3] == 0x18 && rest[0]&0xF0 == 0x50 {
		if len(rest) < 13 || binary.LittleEndian.Uint32(rest) != envelopeMagic {
			return nil, errors.New("specreader: damaged envelope")
		}
		if binary.LittleEndian.Uint32(rest[4:]) != 5 || rest[8] != 2 {
			return nil, fmt.Errorf("specreader: envelope of %d bytes, version %d", binary.LittleEndian.Uint32(rest[4:]), rest[8])
		}
		p.Version = 2
		want := binary.LittleEndian.Uint32(rest[9:])
		rest = rest[13:]
		if got := crc32.Checksum(rest, castagnoli); got != want {
			return nil, fmt.Errorf("%w: stored %08x, computed %08x", ErrChecksum, want, got)
		}
	}
	// Exactly one zstd frame ("Versions and the checksum"): what follows
	// it, another frame included, is refused.
	n, err := frameLen(rest)
	if err != nil {
		return nil, err
	}
	if n != len(rest) {
		return nil, fmt.Errorf("specreader: %d bytes after the zstd frame", len(rest)-n)
	}
	body, err := zdec.DecodeAll(rest, nil)
	if err != nil {
		return nil, fmt.Errorf("specreader: zstd: %w", err)
	}
	return body, nil
}

// frameLen walks one zstd frame (RFC 8878 3.1.1: header, blocks, optional
// checksum) and returns its length.
func frameLen(b []byte) (int, error) {
	short := errors.New("specreader: zstd frame cut short")
	if len(b) < 5 || binary.LittleEndian.Uint32(b) != 0xFD2FB528 {
		return 0, errors.New("specreader: no zstd frame")
	}
	d := b[4]
	n := 5
	if d&0x20 == 0 {
		n++
	}
	n += []int{0, 1, 2, 4}[d&3]
	switch d >> 6 {
	case 0:
		if d&0x20 != 0 {
			n++
		}
	case 1:
		n += 2
	case 2:
		n += 4
	case 3:
		n += 8
	}
	for last := false; !last; {
		if n+3 > len(b) {
			return 0, short
		}
		h := uint32(b[n]) | uint32(b[n+1])<<8 | uint32(b[n+2])<<16
		last = h&1 == 1
		size := int(h >> 3)
		switch (h >> 1) & 3 {
		case 1:
			size = 1
		case 3:
			return 0, errors.New("specreader: reserved zstd block type")
		}
		n += 3 + size
	}
	if d&4 != 0 {
		n += 4
	}
	if n > len(b) {
		return 0, short
	}
	return n, nil
}

// reader reads a body; the first error sticks and later reads return
// zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("specreader: "+format, a...)
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail("%d bytes wanted, %d left", n, len(r.b))
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) str() string { return string(r.bytes(r.uvarint())) }

// count reads a count of items of at least min bytes each.
func (r *reader) count(min int) uint64 {
	n := r.uvarint()
	if n > uint64(len(r.b)/min) {
		r.fail("count %d over the %d bytes left", n, len(r.b))
		return 0
	}
	return n
}

// cut reads a cut; ids ascend and are distinct.
func (r *reader) cut() map[string]uint64 {
	n := r.count(2)
	c := make(map[string]uint64, n)
	var prev uint64
	for i := uint64(0); i < n; i++ {
		id, off := r.uvarint(), r.uvarint()
		if i > 0 && id <= prev {
			r.fail("cut ids not ascending")
		}
		c[strconv.FormatUint(id, 10)], prev = off, id
	}
	return c
}

// commit reads the binary commit record; chain: kind 3's fields too.
func (r *reader) commit(chain bool) *Commit {
	c := &Commit{}
	c.Txn = r.uvarint()
	c.Instance = r.str()
	c.CommittedAtNs = r.varint()
	c.Events = r.uvarint()
	c.Bytes = r.uvarint()
	c.Cut = r.cut()
	c.Watermark.LowerNs = r.varint()
	c.Watermark.UpperNs = r.varint()
	c.Watermark.Cut = r.cut()
	if r.err == nil && (c.Txn == 0 || len(c.Cut) == 0) {
		r.fail("commit record without txn or cut")
	}
	if !chain {
		return c
	}
	store := r.str()
	if i := strings.LastIndexByte(store, '/'); i >= 0 {
		c.Store, c.Station = store[:i], store[i+1:]
	} else {
		c.Store = store
	}
	if c.EpochBase = r.uvarint(); c.EpochBase > 1<<32-1 {
		r.fail("epoch base %d", c.EpochBase)
	}
	switch r.uvarint() {
	case 0:
	case 1:
		l := &Lost{Reason: r.str(), Store: r.str()}
		l.From, l.To = r.cut(), r.cut()
		l.CentralSeq, l.FoundAtNs = r.uvarint(), r.varint()
		if r.err == nil && (len(l.From) == 0 || l.Reason == "") {
			r.fail("gap marker without a start or a reason")
		}
		c.Lost = l
	default:
		r.fail("lost neither 0 nor 1")
	}
	return c
}

// events reads the string table, the event metadata and the payloads.
func (r *reader) events(p *Pack) {
	strs := make([]string, r.count(1))
	for i := range strs {
		strs[i] = r.str()
	}
	str := func() string {
		i := r.uvarint()
		if i >= uint64(len(strs)) {
			r.fail("string index %d of %d", i, len(strs))
			return ""
		}
		return strs[i]
	}
	n := r.count(minEventBytes)
	lens := make([]uint64, n)
	var seg, off uint64
	var et, it int64
	for i := range lens {
		e := Event{Headers: [][2]string{}}
		e.Flags = r.uvarint()
		if e.Flags >= 1<<16 {
			r.fail("flags %#x", e.Flags)
		}
		e.RoutingKey, e.Writer, e.ContentType = str(), str(), str()
		seg += uint64(r.varint())
		off += uint64(r.varint()) + 1
		et += r.varint()
		it += r.varint()
		e.Segment, e.Offset, e.EventTimeNs, e.IngestTimeNs = seg, off, et, it
		for range r.count(minHeaderBytes) {
			k, v := str(), str()
			e.Headers = append(e.Headers, [2]string{k, v})
		}
		lens[i] = r.uvarint()
		if e.Flags&markerBit != 0 {
			if len(e.Headers) != 1 || e.Headers[0][0] != "dropped" || lens[i] != 0 {
				r.fail("marker without exactly its dropped header, or with a payload")
			} else {
				e.Dropped, e.Headers, e.Flags = e.Headers[0][1], [][2]string{}, e.Flags&^markerBit
				if e.Dropped == "" {
					e.Dropped = "unknown" // as layout 1's empty Edge-Dropped
				}
			}
		}
		p.Events = append(p.Events, e)
	}
	for i := range p.Events {
		p.Events[i].Payload = r.bytes(lens[i])
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the last payload", len(r.b))
	}
}

// unescapeToken undoes subject-token escaping ("Subject tokens").
func unescapeToken(t string) (string, error) {
	if t == "%" {
		return "", nil
	}
	kept := func(c byte) bool {
		return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case kept(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(t) && strings.IndexByte(hex, t[i+1]) >= 0 && strings.IndexByte(hex, t[i+2]) >= 0:
			v := byte(strings.IndexByte(hex, t[i+1])<<4 | strings.IndexByte(hex, t[i+2]))
			if kept(v) {
				return "", fmt.Errorf("specreader: token %q escapes a kept byte", t)
			}
			b.WriteByte(v)
			i += 2
		default:
			return "", fmt.Errorf("specreader: token %q", t)
		}
	}
	if t == "" {
		return "", errors.New("specreader: empty token")
	}
	return b.String(), nil
}
