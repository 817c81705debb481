package flight

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"

	"github.com/foxglove/mcap/go/mcap"
)

// Topics of a record.
const (
	TopicEvents = "/flight/events"
	TopicGaps   = "/flight/gaps"
)

// Channel kinds: how a topic's messages are encoded.
const (
	encJSON    = "json"
	encMAVLink = "mavlink" // one MAVLink v1/v2 frame per message, as received
	encRaw     = "raw"     // the payload's bytes as stored
)

// Entry is one event of a record, on /flight/events: where the centre
// holds it, its times and flags, the topic its payload went to, how many
// messages it became there, and the SHA-256 of its payload (the
// concatenation of those messages' payload bytes).
type Entry struct {
	N            uint32 `json:"n"`
	Stream       string `json:"stream"`
	Agent        string `json:"agent"`
	Seq          uint64 `json:"seq"`
	Txn          uint64 `json:"txn"`
	Position     string `json:"position"`
	Key          string `json:"routing_key"`
	Writer       string `json:"writer,omitempty"`
	EventTimeNs  int64  `json:"event_time_ns"`
	IngestTimeNs int64  `json:"ingest_time_ns"`
	Flags        uint16 `json:"flags,omitempty"`
	ContentType  string `json:"content_type,omitempty"`
	// Dropped is a marker's reason: the event could not be sent.
	Dropped       string `json:"dropped,omitempty"`
	Topic         string `json:"topic"`
	Messages      int    `json:"messages"`
	PayloadSHA256 string `json:"payload_sha256"`
}

// appendJSON appends the entry as json.Marshal writes it (jsonappend.go).
func (e *Entry) appendJSON(b []byte) []byte {
	b = append(b, `{"n":`...)
	b = strconv.AppendUint(b, uint64(e.N), 10)
	b = append(b, `,"stream":`...)
	b = appendJSONString(b, e.Stream)
	b = append(b, `,"agent":`...)
	b = appendJSONString(b, e.Agent)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"txn":`...)
	b = strconv.AppendUint(b, e.Txn, 10)
	b = append(b, `,"position":`...)
	b = appendJSONString(b, e.Position)
	b = append(b, `,"routing_key":`...)
	b = appendJSONString(b, e.Key)
	if e.Writer != "" {
		b = append(b, `,"writer":`...)
		b = appendJSONString(b, e.Writer)
	}
	b = append(b, `,"event_time_ns":`...)
	b = strconv.AppendInt(b, e.EventTimeNs, 10)
	b = append(b, `,"ingest_time_ns":`...)
	b = strconv.AppendInt(b, e.IngestTimeNs, 10)
	if e.Flags != 0 {
		b = append(b, `,"flags":`...)
		b = strconv.AppendUint(b, uint64(e.Flags), 10)
	}
	if e.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = appendJSONString(b, e.ContentType)
	}
	if e.Dropped != "" {
		b = append(b, `,"dropped":`...)
		b = appendJSONString(b, e.Dropped)
	}
	b = append(b, `,"topic":`...)
	b = appendJSONString(b, e.Topic)
	b = append(b, `,"messages":`...)
	b = strconv.AppendInt(b, int64(e.Messages), 10)
	b = append(b, `,"payload_sha256":`...)
	b = appendJSONString(b, e.PayloadSHA256)
	return append(b, '}')
}

// Gap is a gap marker of the record, on /flight/gaps and in the
// certificate: a marker event (the agent could not send it, or shed
// events), or a loss found when a chain resumed.
type Gap struct {
	// Kind is "marker" (an event the agent could not send), "shed" (a
	// gap event: events shed by policy) or "lost" (a loss record).
	Kind     string `json:"kind"`
	Stream   string `json:"stream"`
	Agent    string `json:"agent"`
	Position string `json:"position,omitempty"`
	Key      string `json:"routing_key,omitempty"`
	Reason   string `json:"reason"`
	TimeNs   int64  `json:"time_ns"`
	// Payload is a shed marker's payload (what was shed), as stored.
	Payload string `json:"payload,omitempty"`
}

// chain is the certificate's hash chain over entries.
type chain struct {
	head [32]byte
	n    int
}

// add chains one entry's bytes as written.
func (c *chain) add(entry []byte) {
	var link [64]byte // head ‖ leaf
	copy(link[:32], c.head[:])
	leaf := sha256.Sum256(entry)
	copy(link[32:], leaf[:])
	c.head = sha256.Sum256(link[:])
	c.n++
}

func (c *chain) hex() string { return hex.EncodeToString(c.head[:]) }

// recordWriter writes an MCAP record: channels made on first use, every
// message counted per topic, entries chained. Its methods are called by
// one goroutine (the merge); the MCAP writer itself runs on the pipe's
// goroutine (recordpipe.go) until close or abandon.
type recordWriter struct {
	w        *mcap.Writer
	pipe     recordPipe
	cc       *chunkCompressor  // returned to the free list by close (nil: the library's)
	schemas  map[string]uint16 // schema name → id
	channels map[string]uint16 // topic → id
	counts   map[string]int
	chain    chain
	entryLog uint64 // the last log time on /flight/events
}

// chunkSize is the size of a chunk's records at which the writer closes
// it (the MCAP library's default).
const chunkSize = 1 << 20

func newRecordWriter(out io.Writer, level mcap.CompressionLevel) (*recordWriter, error) {
	if level != mcap.CompressionLevelFastest {
		// Other levels are for a reader's own measurements: the
		// library's encoder at that level.
		w, err := mcap.NewWriter(out, &mcap.WriterOptions{Chunked: true, ChunkSize: chunkSize, IncludeCRC: true,
			Compression: mcap.CompressionZSTD, CompressionLevel: level})
		if err != nil {
			return nil, err
		}
		return startRecord(w, nil)
	}
	cc, err := getChunkCompressor()
	if err != nil {
		return nil, err
	}
	w, err := mcap.NewWriter(out, &mcap.WriterOptions{Chunked: true, ChunkSize: chunkSize, IncludeCRC: true,
		Compressor: mcap.NewCustomCompressor(mcap.CompressionZSTD, cc)})
	if err != nil {
		return nil, err
	}
	return startRecord(w, cc)
}

func startRecord(w *mcap.Writer, cc *chunkCompressor) (*recordWriter, error) {
	if err := w.WriteHeader(&mcap.Header{Profile: "", Library: "edge-agent flight"}); err != nil {
		return nil, err
	}
	rw := &recordWriter{w: w, cc: cc, schemas: map[string]uint16{}, channels: map[string]uint16{}, counts: map[string]int{}}
	rw.pipe.start(w)
	return rw, nil
}

// channel returns the id of topic's channel, writing its schema and
// channel records on first use. schemaName "" means no schema; a
// protobuf channel's schema is a FileDescriptorSet, others' JSON Schema.
func (rw *recordWriter) channel(topic, encoding, schemaName, schema string) (uint16, error) {
	if id, ok := rw.channels[topic]; ok {
		return id, nil
	}
	var sid uint16
	if schemaName != "" {
		var ok bool
		if sid, ok = rw.schemas[schemaName]; !ok {
			sid = uint16(len(rw.schemas) + 1)
			schemaEnc := "jsonschema"
			if encoding == encProtobuf {
				schemaEnc = "protobuf"
			}
			if err := rw.pipe.add(writeOp{schema: &mcap.Schema{ID: sid, Name: schemaName, Encoding: schemaEnc, Data: []byte(schema)}}); err != nil {
				return 0, err
			}
			rw.schemas[schemaName] = sid
		}
	}
	id := uint16(len(rw.channels))
	if err := rw.pipe.add(writeOp{channel: &mcap.Channel{ID: id, SchemaID: sid, Topic: topic, MessageEncoding: encoding}}); err != nil {
		return 0, err
	}
	rw.channels[topic] = id
	return id, nil
}

// message writes one message on topic (whose channel exists).
func (rw *recordWriter) message(topic string, seq uint32, logNs, pubNs int64, data []byte) error {
	return rw.put(topic, seq, logNs, pubNs, append(rw.next(), data...))
}

// next returns the bytes a message is appended to (then put).
func (rw *recordWriter) next() []byte { return rw.pipe.cur.data }

// put writes one message on topic (whose channel exists): b is next()
// with the message's bytes appended.
func (rw *recordWriter) put(topic string, seq uint32, logNs, pubNs int64, b []byte) error {
	rw.counts[topic]++
	from := len(rw.pipe.cur.data)
	rw.pipe.cur.data = b
	return rw.pipe.add(writeOp{msg: mcap.Message{ChannelID: rw.channels[topic], Sequence: seq,
		LogTime: uint64(max(logNs, 0)), PublishTime: uint64(max(pubNs, 0))}, from: from, to: len(b)})
}

// entry writes an event's entry and chains it. Its log time is the
// event's ingest time, or the last entry's when that is later (entries
// of the merged streams stay in order on their channel).
func (rw *recordWriter) entry(e *Entry) error {
	if _, err := rw.channel(TopicEvents, encJSON, "edge.flight.Entry", schemaEntry); err != nil {
		return err
	}
	b := e.appendJSON(rw.next())
	rw.chain.add(b[len(rw.pipe.cur.data):])
	rw.entryLog = max(rw.entryLog, uint64(max(e.IngestTimeNs, 0)))
	return rw.put(TopicEvents, e.N, int64(rw.entryLog), e.EventTimeNs, b)
}

// ChannelCount is how many messages a topic holds.
type ChannelCount struct {
	Topic    string `json:"topic"`
	Messages int    `json:"messages"`
}

func (rw *recordWriter) channelCounts() []ChannelCount {
	out := make([]ChannelCount, 0, len(rw.counts))
	for t, n := range rw.counts {
		out = append(out, ChannelCount{Topic: t, Messages: n})
	}
	sortChannels(out)
	return out
}

// close writes the attachments and metadata and the summary.
func (rw *recordWriter) close(meta map[string]string, cert []byte, createdNs int64) error {
	if err := rw.pipe.stop(false); err != nil {
		return err
	}
	if err := rw.w.WriteMetadata(&mcap.Metadata{Name: "flight", Metadata: meta}); err != nil {
		return fmt.Errorf("flight: metadata: %w", err)
	}
	if err := rw.w.WriteAttachment(&mcap.Attachment{LogTime: uint64(createdNs), CreateTime: uint64(createdNs),
		Name: CertificateName, MediaType: "application/json", DataSize: uint64(len(cert)), Data: bytesReader(cert)}); err != nil {
		return fmt.Errorf("flight: certificate attachment: %w", err)
	}
	if err := rw.w.Close(); err != nil {
		return err
	}
	if rw.cc != nil {
		putChunkCompressor(rw.cc)
	}
	return nil
}

// abandon stops the writer goroutine of a record that will not be
// closed (an error); after close it does nothing.
func (rw *recordWriter) abandon() { _ = rw.pipe.stop(true) }
