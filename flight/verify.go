package flight

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"

	"github.com/foxglove/mcap/go/mcap"
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
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	r, err := mcap.NewReader(rs)
	if err != nil {
		return nil, fmt.Errorf("flight: not an MCAP file: %w", err)
	}
	info, err := r.Info()
	if err != nil {
		return nil, fmt.Errorf("flight: the MCAP summary does not read: %w", err)
	}
	cert, err := readCertificate(r, info)
	if err != nil {
		rep.problem("%v", err)
		return rep, nil
	}
	rep.Certificate = cert
	if err := cert.checkSignature(o.Trusted); err != nil {
		rep.problem("certificate: %v", err)
	}
	if o.Sidecar != nil {
		checkSidecar(rep, o.Sidecar, cert)
	}
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	r2, err := mcap.NewReader(rs)
	if err != nil {
		return nil, err
	}
	it, err := r2.Messages(mcap.UsingIndex(false), mcap.InOrder(mcap.FileOrder))
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	entries := map[uint32][]byte{}
	data := map[string]*eventData{} // "N topic"
	var gaps []Gap
	for {
		_, ch, m, err := it.NextInto(nil)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rep.problem("the file does not read to its end: %v", err)
			break
		}
		rep.Messages++
		counts[ch.Topic]++
		switch {
		case ch.Topic == TopicEvents:
			if _, dup := entries[m.Sequence]; dup {
				rep.problem("/flight/events: entry %d twice", m.Sequence)
			}
			entries[m.Sequence] = m.Data
		case ch.Topic == TopicGaps:
			var g Gap
			if err := json.Unmarshal(m.Data, &g); err != nil {
				rep.problem("/flight/gaps: a message is not a gap marker: %v", err)
				continue
			}
			gaps = append(gaps, g)
			if m.Sequence != 0 {
				p, err := base64.StdEncoding.DecodeString(g.Payload)
				if err != nil {
					rep.problem("/flight/gaps: marker of event %d: payload not base64", m.Sequence)
				}
				addData(data, m.Sequence, ch.Topic, p)
			}
		case m.Sequence != 0:
			p := m.Data
			if strings.HasPrefix(ch.Topic, "/video/") {
				var v compressedVideo
				if err := json.Unmarshal(m.Data, &v); err != nil {
					rep.problem("%s: message of event %d is not a CompressedVideo: %v", ch.Topic, m.Sequence, err)
				}
				p = v.Data
			}
			addData(data, m.Sequence, ch.Topic, p)
		}
	}
	checkGaps(rep, cert, gaps)
	checkChannels(rep, cert, counts, info)
	checkEntries(rep, cert, entries, data)
	return rep, nil
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

func readCertificate(r *mcap.Reader, info *mcap.Info) (Certificate, error) {
	var c Certificate
	for _, a := range info.AttachmentIndexes {
		if a.Name != CertificateName {
			continue
		}
		ar, err := r.GetAttachmentReader(a.Offset)
		if err != nil {
			return c, fmt.Errorf("the certificate attachment does not read: %v", err)
		}
		b, err := io.ReadAll(ar.Data())
		if err != nil {
			return c, fmt.Errorf("the certificate attachment does not read: %v", err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return c, fmt.Errorf("the certificate attachment is not a certificate: %v", err)
		}
		return c, nil
	}
	return c, fmt.Errorf("the file holds no %s attachment", CertificateName)
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

func checkChannels(rep *VerifyReport, cert Certificate, counts map[string]int, info *mcap.Info) {
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
	if info.Statistics != nil {
		for t, n := range info.ChannelCounts() {
			if int(n) != counts[t] {
				rep.problem("channel %s: the file's statistics say %d messages, it holds %d", t, n, counts[t])
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
