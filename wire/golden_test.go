package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// The golden vectors of the central format (docs/central-format.md,
// "Golden vectors"): testdata/central-format/NAME.pack is a pack as the
// agent writes it today, NAME.json what it decodes to; v1-NAME.pack is
// the same content written by the agent before the checksum (version 1,
// commit c8cb2ef's encoder; -update never rewrites those).
//
//	go test ./wire -run TestGoldenVectors -update
var update = flag.Bool("update", false, "rewrite testdata/central-format from the encoder")

const goldenDir = "../testdata/central-format"

// goldenVector is one golden vector's input: the events of one pack and
// its commit record (nil: a part of transaction txn).
type goldenVector struct {
	name, subject string
	recs          []localstream.Record
	commit        *PackCommit
	txn           uint64
	// compress: the writer may compress (false: stored, as for video).
	compress bool
	// noV1: a vector added after version 2, with no version-1 twin.
	noV1 bool
}

const goldenT0 = 1_767_225_600_000_000_000 // 2026-01-01T00:00:00Z

// goldenRecords returns n telemetry records of two drones, JSON or random
// payloads, consecutive offsets in segment 0.0 from first.
func goldenRecords(n int, first uint64, random bool) []localstream.Record {
	rng := rand.New(rand.NewPCG(7, 11))
	out := make([]localstream.Record, n)
	for i := range out {
		d := fmt.Sprintf("drone-%d", i%2)
		r := localstream.Record{Position: localstream.Position{Offset: first + uint64(i)}, Event: localstream.Event{
			RoutingKey: d, Writer: "telemetry/" + d, EventTime: goldenT0 + int64(i)*20_000_000,
			IngestTime: goldenT0 + int64(i)*20_000_000 + 1_500_000, ContentType: "application/json",
			Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}},
			Payload: fmt.Appendf(nil, `{"drone":%q,"seq":%d,"lat":47.%06d,"lon":8.%06d,"alt":%d,"battery":%d}`, d, i, rng.IntN(1e6), rng.IntN(1e6), 400+i%50, 90-i%40),
		}}
		if random {
			r.ContentType = "application/octet-stream"
			r.Payload = make([]byte, 64+i%3*40)
			for j := range r.Payload {
				r.Payload[j] = byte(rng.Uint32())
			}
		}
		out[i] = r
	}
	return out
}

// goldenFlagRecords has one event per flag bit (clock skew included),
// one with every flag, markers (a plain one and one cut to 1 KiB), an
// empty payload, unknown and extreme times, odd headers, segment changes
// that move the offset back, and a routing key that needs a hashed token.
func goldenFlagRecords() []localstream.Record {
	seg1 := localstream.NewSegmentID(0, 1)
	seg2 := localstream.NewSegmentID(1, 0) // epoch 1
	ev := func(seg localstream.SegmentID, off uint64, fl localstream.Flags, key string) localstream.Record {
		return localstream.Record{Position: localstream.Position{Segment: seg, Offset: off}, Event: localstream.Event{
			RoutingKey: key, Writer: "video/" + key, EventTime: goldenT0 + int64(off)*1_000_000, IngestTime: goldenT0 + int64(off)*1_000_000 + 250_000,
			ContentType: "video/h264", Flags: fl, Payload: fmt.Appendf(nil, "\x00\x00\x00\x01chunk %d.%d", seg, off),
			Headers: []localstream.Header{{Key: "frame-pts", Value: fmt.Sprintf("%d,%d", goldenT0+int64(off)*1_000_000, goldenT0+int64(off)*1_000_000+33_333_333)}},
		}}
	}
	var out []localstream.Record
	for i, fl := range []localstream.Flags{localstream.FlagKeyframe, localstream.FlagDiscontinuity, localstream.FlagLate,
		localstream.FlagEstimatedTime, localstream.FlagGap, localstream.FlagRaw, localstream.FlagClockSkew} {
		out = append(out, ev(0, uint64(10+i), fl, "cam-1"))
	}
	all := ev(0, 17, localstream.FlagKeyframe|localstream.FlagDiscontinuity|localstream.FlagLate|localstream.FlagEstimatedTime|
		localstream.FlagGap|localstream.FlagRaw|localstream.FlagClockSkew, "cam-1")
	out = append(out, all)
	// Another segment: the offset goes back (a negative delta).
	empty := ev(seg1, 3, 0, "cam-2")
	empty.Payload, empty.ContentType, empty.Headers = nil, "", nil
	out = append(out, empty)
	unknown := ev(seg1, 5, localstream.FlagEstimatedTime, "cam-2")
	unknown.EventTime = 0
	out = append(out, unknown)
	extreme := ev(seg1, 6, 0, "cam-2")
	extreme.EventTime, extreme.IngestTime = math.MinInt64, math.MaxInt64
	out = append(out, extreme)
	odd := ev(seg1, 7, 0, "fleet.a/7 ü")
	odd.Headers = append(odd.Headers, localstream.Header{Key: "odd key=&", Value: ""}, localstream.Header{Key: "ssrc", Value: "0x1234abcd"},
		localstream.Header{Key: "frame-pts", Value: "second"})
	out = append(out, odd)
	long := ev(seg2, 0, localstream.FlagKeyframe, strings.Repeat("drone/", 30)+"x")
	out = append(out, long)
	// Markers: an event the centre could not take, and one whose writer
	// and key were too long even for a marker.
	out = append(out, PackMarker(ev(seg2, 1, localstream.FlagKeyframe, "cam-1"), "replicate: event larger than the central max payload: event 1.0:1 of 2000000 bytes", false))
	big := ev(seg2, 2, 0, strings.Repeat("k", 3000))
	big.Writer = strings.Repeat("w", 3000)
	out = append(out, PackMarker(big, "replicate: event larger than the central max payload", true))
	out = append(out, ev(seg2, 3, 0, "cam-1"))
	return out
}

// goldenCut is a stream cut of telemetry.
func goldenCut(pos map[localstream.SegmentID]uint64) localstream.StreamCut {
	return localstream.StreamCut{Stream: "telemetry", Positions: pos}
}

// goldenCommit is a commit record of txn; meta its chain fields.
func goldenCommit(txn uint64, recs []localstream.Record, meta CommitMeta) *PackCommit {
	pos := map[localstream.SegmentID]uint64{}
	var bytes int64
	for _, r := range recs {
		pos[r.Segment] = max(pos[r.Segment], r.Offset+1)
		bytes += int64(len(r.Payload))
	}
	if len(pos) == 0 {
		pos[0] = 1
	}
	cut := goldenCut(pos)
	wm := watermark.Watermark{LowerNs: goldenT0 - 5_000_000_000, UpperNs: goldenT0 + 1_000_000_000, Cut: cut}
	return &PackCommit{Txn: txn, Instance: "9f00c0ffee15600d", CommittedAtNs: goldenT0 + 2_000_000_000,
		Events: len(recs), Bytes: bytes, Cut: cut, Watermark: wm, Chain: meta}
}

// goldenVectors are the packs of testdata/central-format (docs/central-format.md).
func goldenVectors() []goldenVector {
	const cut, part = "edge.telemetry.agent-1.cut", "edge.telemetry.agent-1.part"
	json20 := goldenRecords(20, 100, false)
	random5 := goldenRecords(5, 7, true)
	flags := goldenFlagRecords()
	lostFrom := goldenCut(map[localstream.SegmentID]uint64{0: 100})
	lostTo := goldenCut(map[localstream.SegmentID]uint64{0: 180})
	chainRecs := goldenRecords(3, 200, false)
	for i := range chainRecs {
		chainRecs[i].Segment = localstream.NewSegmentID(3, 0) // under epoch base 3: central epoch 3
	}
	bigRec := goldenRecords(1, 300, true)
	bigRec[0].Payload = make([]byte, 140_000) // over one 128 KiB zstd block
	for i := range bigRec[0].Payload {
		bigRec[0].Payload[i] = byte(i * 7919 >> 3)
	}
	bigRec[0].ContentType = "video/h265"
	nonUTF8 := goldenRecords(1, 400, false)
	nonUTF8[0].RoutingKey, nonUTF8[0].Writer = goldenNonUTF8Key, "telemetry/"+goldenNonUTF8Key
	nonUTF8[0].Headers = []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + goldenNonUTF8Key + "/telemetry"}}
	emptyReason := []localstream.Record{PackMarker(goldenRecords(1, 500, false)[0], "", false)}
	return []goldenVector{
		{name: "commit-json-compressed", subject: cut, recs: json20, commit: goldenCommit(42, json20, CommitMeta{}), compress: true},
		{name: "commit-json-stored", subject: cut, recs: json20, commit: goldenCommit(42, json20, CommitMeta{}), compress: false},
		{name: "commit-random", subject: cut, recs: random5, commit: goldenCommit(43, random5, CommitMeta{}), compress: true},
		{name: "commit-flags-markers", subject: cut, recs: flags, commit: goldenCommit(44, flags, CommitMeta{}), compress: false},
		{name: "commit-flags-markers-compressed", subject: cut, recs: flags, commit: goldenCommit(44, flags, CommitMeta{}), compress: true},
		{name: "commit-empty", subject: cut, recs: nil, commit: goldenCommit(45, nil, CommitMeta{}), compress: true},
		{name: "chain-store", subject: cut, recs: chainRecs, commit: goldenCommit(46, chainRecs, CommitMeta{Store: "5eed0123456789ab", EpochBase: 3})},
		{name: "chain-station", subject: cut, recs: chainRecs, commit: goldenCommit(46, chainRecs, CommitMeta{Store: "5eed0123456789ab", Station: "7a1c0de5f00dbabe", EpochBase: 3})},
		{name: "chain-lost-open", subject: cut, recs: chainRecs, commit: goldenCommit(46, chainRecs, CommitMeta{Store: "5eed0123456789ab", Station: "7a1c0de5f00dbabe", EpochBase: 3,
			Lost: &LostRange{Reason: LossLocalTail, Store: "5eed0123456789ab", From: lostFrom.Map(), CentralSeq: 0, FoundAtNs: goldenT0 + 1_000}})},
		{name: "chain-lost-closed", subject: cut, recs: chainRecs, commit: goldenCommit(46, chainRecs, CommitMeta{Store: "5eed0123456789ab", EpochBase: 3,
			Lost: &LostRange{Reason: LossCentralTail, Store: "0ddba11000000001", From: lostFrom.Map(), To: lostTo.Map(), CentralSeq: 17, FoundAtNs: goldenT0 + 2_000}})},
		{name: "part-big-event", subject: part, recs: bigRec, txn: 47},
		{name: "part-commit", subject: cut, recs: nil, commit: goldenCommit(47, bigRec, CommitMeta{Store: "5eed0123456789ab"})},
		{name: "commit-non-utf8-key", subject: cut, recs: nonUTF8, commit: goldenCommit(48, nonUTF8, CommitMeta{}), noV1: true},
		{name: "commit-empty-reason", subject: cut, recs: emptyReason, commit: goldenCommit(49, emptyReason, CommitMeta{}), noV1: true},
	}
}

// goldenNonUTF8Key is the key of commit-non-utf8-key: bytes FF and 80
// are no UTF-8 (each becomes one U+FFFD in the JSON form, by every
// replacement rule), a dot needs escaping in a subject token.
const goldenNonUTF8Key = "drone\xff\x80.7"

// The decoded form of a pack (docs/central-format.md, "Golden vectors").
// Every field is always present; cuts map decimal segment ids to offsets.
type (
	goldenPack struct {
		Subject string        `json:"subject"`
		Version int           `json:"version"`
		Codec   int           `json:"codec"`
		Kind    uint64        `json:"kind"`
		Txn     uint64        `json:"txn"`
		Commit  *goldenRecord `json:"commit"`
		Events  []goldenEvent `json:"events"`
	}
	goldenRecord struct {
		Agent         string            `json:"agent"`
		Stream        string            `json:"stream"`
		Txn           uint64            `json:"txn"`
		Instance      string            `json:"instance"`
		Store         string            `json:"store"`
		Station       string            `json:"station"`
		EpochBase     uint32            `json:"epoch_base"`
		Cut           map[string]uint64 `json:"cut"`
		Watermark     goldenWatermark   `json:"watermark"`
		Events        int               `json:"events"`
		Bytes         int64             `json:"bytes"`
		CommittedAtNs int64             `json:"committed_at_ns"`
		Lost          *goldenLost       `json:"lost"`
	}
	goldenWatermark struct {
		LowerNs int64             `json:"lower_ns"`
		UpperNs int64             `json:"upper_ns"`
		Cut     map[string]uint64 `json:"cut"`
	}
	goldenLost struct {
		Reason     string            `json:"reason"`
		Store      string            `json:"store"`
		From       map[string]uint64 `json:"from"`
		To         map[string]uint64 `json:"to"`
		CentralSeq uint64            `json:"central_seq"`
		FoundAtNs  int64             `json:"found_at_ns"`
	}
	goldenEvent struct {
		Segment      uint64      `json:"segment"`
		Offset       uint64      `json:"offset"`
		Flags        uint16      `json:"flags"`
		RoutingKey   string      `json:"routing_key"`
		Writer       string      `json:"writer"`
		ContentType  string      `json:"content_type"`
		EventTimeNs  int64       `json:"event_time_ns"`
		IngestTimeNs int64       `json:"ingest_time_ns"`
		Headers      [][2]string `json:"headers"`
		Payload      []byte      `json:"payload"`
		Dropped      string      `json:"dropped"`
	}
)

// goldenMap is a cut in the golden form (never null).
func goldenMap(c localstream.CutMap) map[string]uint64 {
	m := make(map[string]uint64, len(c))
	for k, v := range c {
		m[k] = v
	}
	return m
}

// goldenDecode decodes a message with DecodeMessage into the golden form.
func goldenDecode(subject string, data []byte) ([]byte, error) {
	evs, rec, err := DecodeMessage(subject, nil, data)
	if err != nil {
		return nil, err
	}
	p, err := decodePack("telemetry", data)
	if err != nil {
		return nil, err
	}
	g := goldenPack{Subject: subject, Version: p.version, Codec: int(p.codec), Kind: p.kind, Txn: p.txn, Events: []goldenEvent{}}
	if rec != nil {
		g.Commit = goldenRecordOf(rec)
	}
	for _, e := range evs {
		g.Events = append(g.Events, goldenEventOf(e))
	}
	out, err := json.MarshalIndent(g, "", "  ")
	return append(out, '\n'), err
}

// goldenRecordOf is a commit record in the golden form.
func goldenRecordOf(rec *CommitRecord) *goldenRecord {
	g := &goldenRecord{Agent: rec.Agent, Stream: rec.Stream, Txn: rec.Txn, Instance: rec.Instance, Store: rec.Store,
		Station: rec.Station, EpochBase: rec.EpochBase, Cut: goldenMap(rec.Cut),
		Watermark: goldenWatermark{LowerNs: rec.Watermark.LowerNs, UpperNs: rec.Watermark.UpperNs, Cut: goldenMap(rec.Watermark.Cut)},
		Events:    rec.Events, Bytes: rec.Bytes, CommittedAtNs: rec.CommittedAtNs}
	if l := rec.Lost; l != nil {
		g.Lost = &goldenLost{Reason: string(l.Reason), Store: l.Store, From: goldenMap(l.From), To: goldenMap(l.To),
			CentralSeq: l.CentralSeq, FoundAtNs: l.FoundAtNs}
	}
	return g
}

// goldenEventOf is an event in the golden form.
func goldenEventOf(e CentralEvent) goldenEvent {
	r := e.Record
	g := goldenEvent{Segment: uint64(r.Segment), Offset: r.Offset, Flags: uint16(r.Flags), RoutingKey: r.RoutingKey,
		Writer: r.Writer, ContentType: r.ContentType, EventTimeNs: r.EventTime, IngestTimeNs: r.IngestTime,
		Headers: [][2]string{}, Payload: r.Payload, Dropped: e.Dropped}
	if g.Payload == nil {
		g.Payload = []byte{}
	}
	for _, h := range r.Headers {
		g.Headers = append(g.Headers, [2]string{h.Key, h.Value})
	}
	return g
}

// goldenEncode is the pack of a vector as the writer writes it.
func goldenEncode(v goldenVector) []byte {
	w := NewPackWriter()
	for i := range v.recs {
		w.Add(&v.recs[i])
	}
	h := &PackHint{}
	if !v.compress {
		h.skip.Store(math.MaxInt32)
	}
	return w.Encode(v.commit, v.txn, h)
}

// TestGoldenVectors: the encoder writes every golden pack byte for byte,
// the decoder reads each (and each version-1 pack) to its golden JSON, and
// a version-1 pack decodes to what its version-2 twin does.
func TestGoldenVectors(t *testing.T) {
	known := map[string]bool{"layout1-flags-markers.msgs.json": true, "layout1-flags-markers.json": true}
	for _, v := range goldenVectors() {
		t.Run(v.name, func(t *testing.T) {
			pack := filepath.Join(goldenDir, v.name+".pack")
			got := goldenEncode(v)
			if *update {
				if err := os.WriteFile(pack, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(pack)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encoder writes %d bytes that differ from %s (%d bytes); run with -update if the change is meant", len(got), pack, len(want))
			}
			compressed := isCompressed(want)
			if v.compress != compressed && v.name != "commit-empty" {
				t.Errorf("compressed %v, want %v", compressed, v.compress)
			}
			j2 := checkGoldenJSON(t, v.subject, want, filepath.Join(goldenDir, v.name+".json"))
			known[v.name+".pack"], known[v.name+".json"] = true, true
			if v.noV1 {
				return
			}
			old := filepath.Join(goldenDir, "v1-"+v.name+".pack")
			v1, err := os.ReadFile(old)
			if err != nil {
				t.Fatal(err)
			}
			j1 := checkGoldenJSON(t, v.subject, v1, filepath.Join(goldenDir, "v1-"+v.name+".json"))
			if !sameButVersion(t, j1, j2) {
				t.Errorf("%s and %s decode to different content", old, pack)
			}
			for _, ext := range []string{".pack", ".json"} {
				known[v.name+ext], known["v1-"+v.name+ext] = true, true
			}
		})
	}
	for _, r := range goldenRefused() {
		known[r.name+".pack"], known[r.name+".json"] = true, true
	}
	ents, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !known[e.Name()] && e.Name() != "README.md" {
			t.Errorf("%s/%s is no golden vector", goldenDir, e.Name())
		}
	}
}

// checkGoldenJSON decodes a pack and compares it with its JSON file
// (written under -update), returning the JSON.
func checkGoldenJSON(t *testing.T, subject string, pack []byte, path string) []byte {
	t.Helper()
	got, err := goldenDecode(subject, pack)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: the decoder's JSON differs; run with -update if the change is meant\n got %.600s\nwant %.600s", path, got, want)
	}
	return got
}

// sameButVersion compares two golden JSON documents but for their
// version and codec.
func sameButVersion(t *testing.T, a, b []byte) bool {
	var x, y map[string]any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "codec"} {
		delete(x, k)
		delete(y, k)
	}
	return reflect.DeepEqual(x, y)
}

// isCompressed reports whether a version-2 pack's frame is compressed
// (not stored).
func isCompressed(b []byte) bool {
	_, stored := storedFrameBody(b[packEnvelopeLen:])
	return b[1] == packCodecZstd && !stored
}

// goldenRefusal is a golden pack a reader refuses: NAME.pack, and
// NAME.json {"subject", "refused": why}.
type goldenRefusal struct {
	name, subject, why string
	pack               []byte
}

// goldenRefused are the refused vectors: commit-empty with a second
// (empty, stored) zstd frame after its first, the checksum made anew, so
// that only the one-frame rule refuses it.
func goldenRefused() []goldenRefusal {
	var empty goldenVector
	for _, v := range goldenVectors() {
		if v.name == "commit-empty" {
			empty = v
		}
	}
	b := goldenEncode(empty)
	b = append(b, 0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38, 0x01, 0x00, 0x00)
	binary.LittleEndian.PutUint32(b[11:], crc32.Checksum(b[packEnvelopeLen:], castagnoli))
	return []goldenRefusal{{name: "refused-second-frame", subject: empty.subject, why: "a second zstd frame after the first", pack: b}}
}

// TestGoldenRefused: the decoder refuses each refused vector, as corrupt
// and not for its checksum.
//
// Failed before (the zstd library decoded both frames): "refused-second-frame: decoded".
func TestGoldenRefused(t *testing.T) {
	for _, r := range goldenRefused() {
		pack, js := filepath.Join(goldenDir, r.name+".pack"), filepath.Join(goldenDir, r.name+".json")
		if *update {
			doc, _ := json.MarshalIndent(map[string]string{"subject": r.subject, "refused": r.why}, "", "  ")
			if err := errors.Join(os.WriteFile(pack, r.pack, 0o644), os.WriteFile(js, append(doc, '\n'), 0o644)); err != nil {
				t.Fatal(err)
			}
		}
		if want, err := os.ReadFile(pack); err != nil || !bytes.Equal(want, r.pack) {
			t.Errorf("%s differs from the vector made (%v); run with -update if the change is meant", pack, err)
		}
		var doc struct{ Subject, Refused string }
		if b, err := os.ReadFile(js); err != nil || json.Unmarshal(b, &doc) != nil || doc.Subject != r.subject || doc.Refused != r.why {
			t.Errorf("%s: %+v (%v)", js, doc, err)
		}
		_, _, err := DecodeMessage(r.subject, nil, r.pack)
		if err == nil || !errors.Is(err, ErrCorruptRecord) || errors.Is(err, ErrPackChecksum) {
			t.Errorf("%s: decoded (error %v), want it refused as corrupt", r.name, err)
		}
		t.Logf("%s: %v", r.name, err)
	}
}

// TestGoldenFlagsCovered: the flag vector holds every localstream flag,
// alone and together, and the marker bit.
func TestGoldenFlagsCovered(t *testing.T) {
	var seen []localstream.Flags
	markers := 0
	for _, r := range goldenFlagRecords() {
		seen = append(seen, r.Flags&^packEventDropped)
		if r.Flags.Has(packEventDropped) {
			markers++
		}
	}
	for f := localstream.FlagKeyframe; f <= localstream.FlagClockSkew; f <<= 1 {
		if !slices.Contains(seen, f) {
			t.Errorf("flag %d alone missing", f)
		}
	}
	if !slices.Contains(seen, 2*localstream.FlagClockSkew-1) || markers != 2 {
		t.Errorf("all flags together missing, or %d markers", markers)
	}
}

// TestPackChecksumRefusesCorruption: changing any byte after a version-2
// pack's envelope is refused by the checksum, with an error that says so
// and gives both sums; a byte changed in the envelope or header is
// refused as well.
func TestPackChecksumRefusesCorruption(t *testing.T) {
	for _, v := range goldenVectors() {
		b := goldenEncode(v)
		step := max(1, len(b)/500)
		for i := 0; i < len(b); i += step {
			for _, x := range []byte{0x01, 0x80} {
				c := bytes.Clone(b)
				c[i] ^= x
				_, err := decodePack("telemetry", c)
				switch {
				case err == nil:
					t.Fatalf("%s: byte %d ^ %#x accepted", v.name, i, x)
				case i >= packEnvelopeLen && !errors.Is(err, ErrPackChecksum):
					t.Fatalf("%s: byte %d ^ %#x: %v, want the checksum error", v.name, i, x, err)
				case !errors.Is(err, ErrCorruptRecord):
					t.Fatalf("%s: byte %d: %v", v.name, i, err)
				}
			}
		}
	}
	b := goldenEncode(goldenVectors()[0])
	b[len(b)-1] ^= 1
	_, err := decodePack("telemetry", b)
	if msg := fmt.Sprint(err); !strings.Contains(msg, "wire: corrupt central record: pack checksum mismatch: stored ") || !strings.Contains(msg, "computed") {
		t.Fatalf("error %q does not say the checksum failed", msg)
	}
	t.Logf("a changed byte: %v", err)
	b = goldenEncode(goldenVectors()[0])
	b[10] = 3
	if _, err := decodePack("telemetry", b); err == nil || !strings.Contains(err.Error(), "pack version 3") {
		t.Fatalf("version 3: %v", err)
	}
}

// A layout-1 golden vector is one transaction's messages as the agent
// sends them (layout1-NAME.msgs.json: subject, headers, payload) and what
// they decode to (layout1-NAME.json, the pack form with "layout": 1 and no
// version, codec or kind).
type (
	goldenMsg struct {
		Subject string              `json:"subject"`
		Headers map[string][]string `json:"headers"`
		Payload []byte              `json:"payload"`
	}
	goldenTxn struct {
		Layout int           `json:"layout"`
		Txn    uint64        `json:"txn"`
		Commit *goldenRecord `json:"commit"`
		Events []goldenEvent `json:"events"`
	}
)

// goldenLayout1 is the flag vector's transaction in layout 1: every
// event a data message (markers by EncodeMarker, one cut to 1 KiB), then
// the JSON commit record with a station and a gap marker.
func goldenLayout1() []goldenMsg {
	const agent, txn = "agent-1", 44
	var out []goldenMsg
	add := func(m *nats.Msg) {
		out = append(out, goldenMsg{Subject: m.Subject, Headers: m.Header, Payload: m.Data})
	}
	recs := goldenFlagRecords()
	for _, r := range recs {
		if r.Flags.Has(packEventDropped) {
			orig, reason := packEvent(r)
			orig.Flags &^= packEventDropped
			if len(orig.RoutingKey) >= markerKeep {
				orig.RoutingKey, orig.Writer = strings.Repeat("k", 3000), strings.Repeat("w", 3000)
				add(EncodeMarker("telemetry", agent, txn, orig, "replicate: event larger than the central max payload", true))
				continue
			}
			add(EncodeMarker("telemetry", agent, txn, orig, reason, false))
			continue
		}
		add(EncodeEvent("telemetry", agent, txn, r))
	}
	c := goldenCommit(txn, recs, CommitMeta{Store: "5eed0123456789ab", Station: "7a1c0de5f00dbabe",
		Lost: &LostRange{Reason: LossLocalTail, Store: "5eed0123456789ab", From: goldenCut(map[localstream.SegmentID]uint64{0: 9}).Map(), CentralSeq: 3, FoundAtNs: goldenT0 + 1_000}})
	data, err := json.Marshal(c.Record(agent, "telemetry"))
	if err != nil {
		panic(err)
	}
	out = append(out, goldenMsg{Subject: CutSubject("telemetry", agent), Headers: map[string][]string{}, Payload: data})
	return out
}

// goldenDecodeLayout1 decodes a layout-1 transaction with DecodeMessage.
func goldenDecodeLayout1(msgs []goldenMsg) ([]byte, error) {
	g := goldenTxn{Layout: 1, Events: []goldenEvent{}}
	for _, m := range msgs {
		evs, rec, err := DecodeMessage(m.Subject, nats.Header(m.Headers), m.Payload)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			g.Txn = e.Txn
			g.Events = append(g.Events, goldenEventOf(e))
		}
		if rec != nil {
			g.Commit = goldenRecordOf(rec)
		}
	}
	out, err := json.MarshalIndent(g, "", "  ")
	return append(out, '\n'), err
}

// TestGoldenLayout1: the layout-1 messages of the flag vector are what
// the encoder sends today, and decode to their golden JSON, which holds
// the same events as the pack vector commit-flags-markers.
func TestGoldenLayout1(t *testing.T) {
	msgs := goldenLayout1()
	in := filepath.Join(goldenDir, "layout1-flags-markers.msgs.json")
	got, err := json.MarshalIndent(msgs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(in, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the encoder's messages differ from %s; run with -update if the change is meant", in)
	}
	var stored []goldenMsg
	if err := json.Unmarshal(want, &stored); err != nil {
		t.Fatal(err)
	}
	dec, err := goldenDecodeLayout1(stored)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(goldenDir, "layout1-flags-markers.json")
	if *update {
		if err := os.WriteFile(out, dec, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want, err := os.ReadFile(out); err != nil || !bytes.Equal(dec, want) {
		t.Errorf("%s: the decoder's JSON differs (%v); run with -update if the change is meant", out, err)
	}
	var l1 goldenTxn
	var l2 goldenPack
	pack, _ := os.ReadFile(filepath.Join(goldenDir, "commit-flags-markers.json"))
	if json.Unmarshal(dec, &l1) != nil || json.Unmarshal(pack, &l2) != nil || len(l1.Events) != len(l2.Events) {
		t.Fatalf("layout 1: %d events, the pack %d", len(l1.Events), len(l2.Events))
	}
	for i := range l1.Events {
		a, b := l1.Events[i], l2.Events[i]
		if b.Dropped != "" && len(b.RoutingKey) == markerKeep { // the pack's marker already cut them
			a.RoutingKey, a.Writer, a.Dropped = b.RoutingKey, b.Writer, b.Dropped
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("event %d: layout 1 %+v\n pack %+v", i, a, b)
		}
	}
}

// TestMarkerShapeRefused: a marker (bit 15) carries exactly its dropped
// header and no payload; one with another header, a payload or no header
// is refused (docs/central-format.md, "Checks a reader makes").
func TestMarkerShapeRefused(t *testing.T) {
	base := PackMarker(goldenRecords(1, 1, false)[0], "why", false)
	extra, payload, none := base, base, base
	extra.Headers = append([]localstream.Header{{Key: "x", Value: "y"}}, base.Headers...)
	payload.Payload = []byte("p")
	none.Headers = nil
	for name, r := range map[string]localstream.Record{"another header": extra, "a payload": payload, "no header": none} {
		w := NewPackWriter()
		w.Add(&r)
		b := w.Encode(goldenCommit(1, []localstream.Record{r}, CommitMeta{}), 0, &PackHint{})
		if _, err := decodePack("telemetry", b); !errors.Is(err, ErrCorruptRecord) || errors.Is(err, ErrPackChecksum) {
			t.Errorf("a marker with %s: %v, want it refused", name, err)
		}
	}
}
