package flight

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strings"

	"github.com/foxglove/mcap/go/mcap"
	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
)

// VerifyOptions say what a record is checked against besides itself.
type VerifyOptions struct {
	// Trusted are the keys a certificate may be signed by (empty: any,
	// the certificate's own key, which proves integrity but not origin).
	Trusted []ed25519.PublicKey
	// Sidecar, when set, is the certificate file written beside the
	// record: its hash of the file and its signature are checked too.
	Sidecar *Sidecar
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	Certificate Certificate
	// SHA256 is the file's hash, hex.
	SHA256 string
	// Messages counts the file's messages.
	Messages int
	// Problems name every cause found; empty: the record is intact.
	Problems []string
}

func (r *VerifyReport) problem(format string, args ...any) {
	if len(r.Problems) < 50 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Err is nil when the record verified, else ErrVerify naming the first
// cause (and how many there are).
func (r *VerifyReport) Err() error {
	switch len(r.Problems) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrVerify, r.Problems[0])
	}
	return fmt.Errorf("%w: %s (and %d more)", ErrVerify, r.Problems[0], len(r.Problems)-1)
}

// eventData is what the file holds of one event on one topic.
type eventData struct {
	sum   hash.Hash
	count int
}

// Verify checks a record on its own: the certificate's signature (and
// key), the hash chain over the entries, every entry's payload against
// its messages, the messages per channel against the certificate and the
// file's statistics, the gap markers against the certificate, and with a
// sidecar the file's hash. It returns the report; a nil error means it
// could read the file, not that it verified (see VerifyReport.Err).
func Verify(rs io.ReadSeeker, o VerifyOptions) (*VerifyReport, error) {
	rep := &VerifyReport{}
	h := sha256.New()
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if _, err := io.Copy(h, rs); err != nil {
		return nil, err
	}
	rep.SHA256 = hex.EncodeToString(h.Sum(nil))
	size, err := rs.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	// One pass over the records in file order with the library's lexer,
	// bounded: no record larger than the file, no chunk that inflates
	// beyond maxChunk (a damaged length cannot make it allocate
	// gigabytes), every chunk's CRC checked.
	// Attachments are not read through the lexer's callback: it
	// allocates a name's length as the file states it before reading
	// (mcap/go v1.7.1 readPrefixedString; a damaged length asks for 4 GiB).
	// The certificate is read by its index entry instead, bounded.
	var certIndex []*mcap.AttachmentIndex
	// zstd with one goroutine and its memory bounded by a chunk's
	// limit (the library's default decoder runs one per core, unbounded).
	zd, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(maxChunk))
	if err != nil {
		return nil, err
	}
	defer zd.Close()
	lex, err := mcap.NewLexer(rs, &mcap.LexerOptions{ValidateChunkCRCs: true,
		MaxRecordSize: int(min(size, maxChunk)), MaxDecompressedChunkSize: maxChunk,
		Decompressors: map[mcap.CompressionFormat]mcap.ResettableReader{mcap.CompressionZSTD: zstdReader{zd}}})
	if err != nil {
		return nil, fmt.Errorf("flight: not an MCAP file: %w", err)
	}
	defer lex.Close()
	channels := map[uint16]*mcap.Channel{}
	var stats *mcap.Statistics
	counts := map[string]int{}
	entries := map[uint32][]byte{}
	data := map[string]*eventData{} // "N topic"
	var gaps []Gap
	func() {
		// The library's lexer panics on some damaged chunk headers
		// (mcap/go v1.7.1 loadChunk slices its 32-byte buffer by a
		// compression-name length read from the file): a damaged record
		// is a verification failure, not a crash.
		defer func() {
			if p := recover(); p != nil {
				rep.problem("the file does not read to its end: the MCAP reader failed on a damaged record (%v)", p)
			}
		}()
		var buf []byte
		for {
			tok, rec, err := lex.Next(buf)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				rep.problem("the file does not read to its end: %v", err)
				return
			}
			if cap(rec) > cap(buf) {
				buf = rec
			}
			switch tok {
			case mcap.TokenChannel:
				ch, err := mcap.ParseChannel(rec)
				if err != nil {
					rep.problem("a channel record does not parse: %v", err)
					continue
				}
				channels[ch.ID] = ch
			case mcap.TokenAttachmentIndex:
				ai, err := mcap.ParseAttachmentIndex(rec)
				if err != nil {
					rep.problem("an attachment index record does not parse: %v", err)
					continue
				}
				if ai.Name == CertificateName {
					certIndex = append(certIndex, ai)
				}
			case mcap.TokenStatistics:
				if stats, err = mcap.ParseStatistics(rec); err != nil {
					rep.problem("the statistics record does not parse: %v", err)
				}
			case mcap.TokenMessage:
				m, err := mcap.ParseMessage(rec)
				if err != nil {
					rep.problem("a message record does not parse: %v", err)
					continue
				}
				ch := channels[m.ChannelID]
				if ch == nil {
					rep.problem("a message on channel %d, which the file does not define before it", m.ChannelID)
					continue
				}
				rep.Messages++
				counts[ch.Topic]++
				fileMessage(rep, ch.Topic, m, entries, data, &gaps)
			}
		}
	}()
	var certBytes []byte
	switch len(certIndex) {
	case 0:
		rep.problem("the file holds no %s attachment", CertificateName)
		return rep, nil
	case 1:
		if certBytes, err = readAttachment(rs, certIndex[0], size); err != nil {
			rep.problem("the certificate attachment does not read: %v", err)
			return rep, nil
		}
	default:
		rep.problem("the file holds %d %s attachments", len(certIndex), CertificateName)
		return rep, nil
	}
	var cert Certificate
	if err := json.Unmarshal(certBytes, &cert); err != nil {
		rep.problem("the certificate attachment is not a certificate: %v", err)
		return rep, nil
	}
	rep.Certificate = cert
	if err := cert.checkSignature(o.Trusted); err != nil {
		rep.problem("certificate: %v", err)
	}
	if o.Sidecar != nil {
		checkSidecar(rep, o.Sidecar, cert)
	}
	checkGaps(rep, cert, gaps)
	checkChannels(rep, cert, counts, channels, stats)
	checkEntries(rep, cert, entries, data)
	return rep, nil
}

// Bounds of what Verify reads: a chunk inflates to at most maxChunk (the
// writer's chunks are 4 MiB; one video access unit is below 1 MiB), the
// certificate is at most maxCertificate.
const (
	maxChunk       = 64 << 20
	maxCertificate = 16 << 20
)

// zstdReader is a zstd decoder as the lexer resets it.
type zstdReader struct{ *zstd.Decoder }

func (z zstdReader) Reset(r io.Reader) error { return z.Decoder.Reset(r) }

// readAttachment reads the data of the attachment record an index entry
// points at, checking every length against the record's and its CRC:
//
//	op(1) len(8) log_time(8) create_time(8) name(4+n) media_type(4+n) data_len(8) data crc(4)
func readAttachment(rs io.ReadSeeker, ai *mcap.AttachmentIndex, size int64) ([]byte, error) {
	if ai.Length > maxCertificate+1024 || int64(ai.Offset) < 0 || int64(ai.Offset)+int64(ai.Length) > size || ai.Length < 9+8+8+4+4+8+4 {
		return nil, fmt.Errorf("its index entry (offset %d, %d bytes) is out of the file or too large", ai.Offset, ai.Length)
	}
	b := make([]byte, ai.Length)
	if _, err := rs.Seek(int64(ai.Offset), io.SeekStart); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(rs, b); err != nil {
		return nil, err
	}
	if b[0] != byte(mcap.OpAttachment) || binary.LittleEndian.Uint64(b[1:9]) != ai.Length-9 {
		return nil, fmt.Errorf("no attachment record at offset %d", ai.Offset)
	}
	body := b[9:]
	p := 16
	for range 2 { // name, media type
		if p+4 > len(body) {
			return nil, fmt.Errorf("truncated")
		}
		n := int(binary.LittleEndian.Uint32(body[p:]))
		if n > len(body)-p-4 {
			return nil, fmt.Errorf("truncated")
		}
		p += 4 + n
	}
	if p+8 > len(body) {
		return nil, fmt.Errorf("truncated")
	}
	n := binary.LittleEndian.Uint64(body[p:])
	p += 8
	if n != uint64(len(body)-p-4) {
		return nil, fmt.Errorf("its data length %d does not fit its record", n)
	}
	data := body[p : p+int(n)]
	if crc := binary.LittleEndian.Uint32(body[p+int(n):]); crc != 0 && crc != crc32.ChecksumIEEE(body[:p+int(n)]) {
		return nil, fmt.Errorf("its CRC does not match")
	}
	return data, nil
}

// fileMessage files one message: an entry, a gap marker, or data of an event.
func fileMessage(rep *VerifyReport, topic string, m *mcap.Message, entries map[uint32][]byte, data map[string]*eventData, gaps *[]Gap) {
	switch {
	case topic == TopicEvents:
		if _, dup := entries[m.Sequence]; dup {
			rep.problem("/flight/events: entry %d twice", m.Sequence)
		}
		entries[m.Sequence] = bytes.Clone(m.Data)
	case topic == TopicGaps:
		var g Gap
		if err := json.Unmarshal(m.Data, &g); err != nil {
			rep.problem("/flight/gaps: a message is not a gap marker: %v", err)
			return
		}
		*gaps = append(*gaps, g)
		if m.Sequence != 0 {
			p, err := base64.StdEncoding.DecodeString(g.Payload)
			if err != nil {
				rep.problem("/flight/gaps: marker of event %d: payload not base64", m.Sequence)
			}
			addData(data, m.Sequence, topic, p)
		}
	case m.Sequence != 0:
		p := m.Data
		if strings.HasPrefix(topic, "/video/") {
			v, err := decodeVideo(m.Data)
			if err != nil {
				rep.problem("%s: message of event %d is not a CompressedVideo: %v", topic, m.Sequence, err)
			}
			p = v.Data
		}
		addData(data, m.Sequence, topic, p)
	}
}

func addData(data map[string]*eventData, seq uint32, topic string, p []byte) {
	k := fmt.Sprintf("%d %s", seq, topic)
	d := data[k]
	if d == nil {
		d = &eventData{sum: sha256.New()}
		data[k] = d
	}
	d.sum.Write(p)
	d.count++
}

func checkSidecar(rep *VerifyReport, s *Sidecar, cert Certificate) {
	if s.MCAPSHA256 != rep.SHA256 {
		rep.problem("the file's SHA-256 is %s, the certificate file says %s", rep.SHA256, s.MCAPSHA256)
	}
	if s.Certificate.Signature != cert.Signature || s.Certificate.Chain != cert.Chain {
		rep.problem("the certificate file is not the certificate the record holds")
	}
	pub, err := base64.StdEncoding.DecodeString(cert.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return
	}
	sig, _ := base64.StdEncoding.DecodeString(s.FileSignature)
	if !ed25519.Verify(pub, sidecarMessage(s.MCAPSHA256, s.Certificate.Signature), sig) {
		rep.problem("the certificate file's signature of the file hash does not match (key %s)", cert.KeyID)
	}
}

// checkEntries recomputes the chain and checks each entry's payload.
func checkEntries(rep *VerifyReport, cert Certificate, entries map[uint32][]byte, data map[string]*eventData) {
	ns := make([]uint32, 0, len(entries))
	for n := range entries {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	var c chain
	for i, n := range ns {
		if n != uint32(i+1) {
			rep.problem("/flight/events: entry %d is missing", i+1)
			break
		}
	}
	for _, n := range ns {
		raw := entries[n]
		c.add(raw)
		var e Entry
		if err := json.Unmarshal(raw, &e); err != nil || e.N != n {
			rep.problem("/flight/events: entry %d does not read", n)
			continue
		}
		d := data[fmt.Sprintf("%d %s", n, e.Topic)]
		what := fmt.Sprintf("event %d (%s %s, %s)", n, e.Stream, e.Position, e.Key)
		if d == nil {
			rep.problem("%s: no message on %s, its entry says %d", what, e.Topic, e.Messages)
			continue
		}
		if d.count != e.Messages {
			rep.problem("%s: %d messages on %s, its entry says %d (a message was removed or added)", what, d.count, e.Topic, e.Messages)
		}
		if got := hex.EncodeToString(d.sum.Sum(nil)); got != e.PayloadSHA256 {
			rep.problem("%s: its payload on %s does not match the SHA-256 of its entry (a byte was changed)", what, e.Topic)
		}
	}
	if c.n != cert.Events {
		rep.problem("the file holds %d events, the certificate %d", c.n, cert.Events)
	}
	if c.hex() != cert.Chain {
		rep.problem("the hash chain over the events is %s, the certificate says %s", c.hex(), cert.Chain)
	}
}

func checkChannels(rep *VerifyReport, cert Certificate, counts map[string]int, channels map[uint16]*mcap.Channel, stats *mcap.Statistics) {
	want := map[string]int{}
	for _, c := range cert.Channels {
		want[c.Topic] = c.Messages
	}
	var topics []string
	for t := range want {
		topics = append(topics, t)
	}
	for t := range counts {
		if _, ok := want[t]; !ok {
			topics = append(topics, t)
		}
	}
	slices.Sort(topics)
	for _, t := range topics {
		if counts[t] != want[t] {
			rep.problem("channel %s: %d messages, the certificate says %d", t, counts[t], want[t])
		}
	}
	if stats == nil {
		rep.problem("the file has no statistics record")
	} else {
		for id, n := range stats.ChannelMessageCounts {
			ch := channels[id]
			if ch == nil {
				rep.problem("the file's statistics count messages of channel %d, which it does not hold", id)
				continue
			}
			if int(n) != counts[ch.Topic] {
				rep.problem("channel %s: the file's statistics say %d messages, it holds %d", ch.Topic, n, counts[ch.Topic])
			}
		}
	}
}

func checkGaps(rep *VerifyReport, cert Certificate, gaps []Gap) {
	key := func(g Gap) string { b, _ := json.Marshal(g); return string(b) }
	have := map[string]int{}
	for _, g := range gaps {
		have[key(g)]++
	}
	for _, g := range cert.Gaps {
		k := key(g)
		if have[k] == 0 {
			rep.problem("gap marker %s %s %s (%s) is in the certificate but not on %s", g.Kind, g.Stream, g.Position, g.Reason, TopicGaps)
			continue
		}
		have[k]--
	}
	for k, n := range have {
		if n > 0 {
			rep.problem("%s holds a gap marker the certificate does not list: %s", TopicGaps, k)
		}
	}
}

// CheckCentral reads the centre again for the certificate's flight and
// compares every line of the certificate with what the centre holds now:
// status, events and hash chain, each stream's commits, each routing
// key's counts and positions, the gap markers and the channels. It
// returns the differences (none: the record is what the centre holds).
func CheckCentral(ctx context.Context, nc *nats.Conn, cert Certificate, streams Streams) ([]string, error) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	o := ExportOptions{FindOptions: FindOptions{Drone: cert.Flight.Drone, Agent: cert.Flight.Agent, Streams: streams}, Key: key}
	res, err := Export(ctx, nc, cert.Flight, o, io.Discard)
	if err != nil {
		return nil, err
	}
	now := res.Certificate
	var diffs []string
	diff := func(what string, was, is any) {
		a, _ := json.Marshal(was)
		b, _ := json.Marshal(is)
		if string(a) != string(b) {
			diffs = append(diffs, fmt.Sprintf("%s: the record says %s, the centre now %s", what, clip(a), clip(b)))
		}
	}
	diff("status", cert.Status, now.Status)
	diff("events", cert.Events, now.Events)
	diff("hash chain", cert.Chain, now.Chain)
	byStream := func(rs []StreamReport) map[string]StreamReport {
		m := map[string]StreamReport{}
		for _, r := range rs {
			m[r.Stream] = r
		}
		return m
	}
	was, is := byStream(cert.Streams), byStream(now.Streams)
	for _, name := range unionKeys(was, is) {
		a, b := was[name], is[name]
		diff("stream "+name+" commits", a.Commits, b.Commits)
		diff("stream "+name+" sequences", [2]uint64{a.FirstSeq, a.LastSeq}, [2]uint64{b.FirstSeq, b.LastSeq})
		diff("stream "+name+" events", a.Events, b.Events)
		diff("stream "+name+" watermark", a.Watermark, b.Watermark)
	}
	diff("routing keys", cert.Keys, now.Keys)
	diff("gap markers", cert.Gaps, now.Gaps)
	diff("channels", cert.Channels, now.Channels)
	return diffs, nil
}

func unionKeys[V any](a, b map[string]V) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
