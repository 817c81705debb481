package unpack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// cursor is where a session resumes: the derived stream's last sequence
// (the next publish's expectation) and the source position of the event
// its last message holds.
type cursor struct {
	// exists is set when the derived stream exists.
	exists bool
	// last is the derived stream's last sequence (0: empty).
	last uint64
	// pos is the last event republished (zero: none).
	pos position
	// skipped is set when the last derived message is a skip marker: the
	// source message at pos.seq is skipped whole.
	skipped bool
}

// msgGetResponse is the $JS.API.STREAM.MSG.GET answer.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Header  []byte `json:"hdrs,omitempty"`
	} `json:"message,omitempty"`
}

// errCodeNoMessage is JetStream's "no message found".
const errCodeNoMessage = 10037

// errCodeSubjectOverlap is JetStream's "subjects overlap with an
// existing stream" (JSStreamSubjectOverlapErr; nats.go names no constant).
const errCodeSubjectOverlap = 10065

// readCursor reads stream's cursor from the derived stream's leader: its
// info (the last sequence) and its last message with STREAM.MSG.GET (a
// direct get could be answered by a lagging replica).
func readCursor(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, p Partition) (cursor, error) {
	name := p.StreamName()
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return cursor{}, nil
	}
	if err != nil {
		return cursor{}, fmt.Errorf("unpack: %s: %w", name, err)
	}
	if err := checkDerived(st.CachedInfo().Config, p); err != nil {
		return cursor{}, err
	}
	c := cursor{exists: true, last: st.CachedInfo().State.LastSeq}
	if c.last == 0 {
		return c, nil
	}
	seq, pos, skipped, found, err := getDerived(ctx, nc, name, map[string]any{"seq": c.last})
	if err != nil {
		return cursor{}, err
	}
	if !found || seq != c.last {
		return cursor{}, fmt.Errorf("%w: %s seq %d", ErrCursorLost, name, c.last)
	}
	c.pos, c.skipped = pos, skipped
	return c, nil
}

// getDerived reads one message of derived stream name from the stream
// leader ($JS.API.STREAM.MSG.GET with req) and the source position it
// names; found is false when there is no such message.
func getDerived(ctx context.Context, nc *nats.Conn, name string, req map[string]any) (seq uint64, pos position, skipped, found bool, err error) {
	b, _ := json.Marshal(req)
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+name, b)
	if err != nil {
		return 0, position{}, false, false, fmt.Errorf("unpack: read %s: %w", name, err)
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return 0, position{}, false, false, fmt.Errorf("unpack: read %s: bad answer: %w", name, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == errCodeNoMessage {
			return 0, position{}, false, false, nil
		}
		return 0, position{}, false, false, fmt.Errorf("unpack: read %s: %w", name, r.Error)
	}
	if r.Message == nil {
		return 0, position{}, false, false, fmt.Errorf("unpack: read %s: empty answer", name)
	}
	h, err := parseHeaders(r.Message.Header)
	if err != nil {
		return 0, position{}, false, false, fmt.Errorf("%w: %s seq %d: %v", ErrBadCursor, name, r.Message.Seq, err)
	}
	if pos, skipped, err = cursorOf(h); err != nil {
		return 0, position{}, false, false, fmt.Errorf("%s seq %d: %w", name, r.Message.Seq, err)
	}
	return r.Message.Seq, pos, skipped, true, nil
}

// parseHeaders decodes a message's raw header block ("NATS/1.0\r\n",
// then MIME lines).
func parseHeaders(b []byte) (nats.Header, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if !bytes.HasPrefix(b, []byte("NATS/1.0")) || i < 0 {
		return nil, fmt.Errorf("no header block")
	}
	mh, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(b[i+2:]))).ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	return nats.Header(mh), nil
}

// checkDerived checks a derived stream's configuration: its one subject
// filter and the partitioning it was made with (a
// stream without that metadata was made with one partition).
func checkDerived(cfg jetstream.StreamConfig, p Partition) error {
	if len(cfg.Subjects) != 1 || cfg.Subjects[0] != p.Subjects() {
		return fmt.Errorf("%w: %s has subjects %v, want [%s]", ErrDerivedMisconfigured, cfg.Name, cfg.Subjects, p.Subjects())
	}
	want := p.metadata()
	got := map[string]string{metaPartitions: "1", metaPartition: "0"}
	for k := range got {
		if v, ok := cfg.Metadata[k]; ok {
			got[k] = v
		}
	}
	if got[metaPartitions] != want[metaPartitions] || got[metaPartition] != want[metaPartition] {
		return fmt.Errorf("%w: %s was made as partition %s of %s, this unpacker writes partition %s of %s (--partitions changed? the derived streams of the old count must be removed first: docs/unpack.md)",
			ErrDerivedMisconfigured, cfg.Name, got[metaPartition], got[metaPartitions], want[metaPartition], want[metaPartitions])
	}
	return nil
}
