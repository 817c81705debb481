package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/edge-agent/edge-agent/live"
	"github.com/edge-agent/edge-agent/localstream"
)

// liveLine is one JSON line of `edge-agent read --live`.
type liveLine struct {
	Type             string          `json:"type"` // "live"
	Agent            string          `json:"agent"`
	Stream           string          `json:"stream"`
	Drone            string          `json:"drone"`
	Writer           string          `json:"writer"`
	Segment          string          `json:"segment"`
	Offset           uint64          `json:"offset"`
	EventTimeNs      int64           `json:"event_time_ns"`
	IngestTimeNs     int64           `json:"ingest_time_ns"`
	SentTimeNs       int64           `json:"sent_time_ns"`
	AgeSeconds       float64         `json:"age_seconds"`
	Keyframe         bool            `json:"keyframe,omitempty"`
	Covered          bool            `json:"covered"`
	CommittedLowerNs int64           `json:"committed_lower_ns"`
	ContentType      string          `json:"content_type,omitempty"`
	Payload          json.RawMessage `json:"payload,omitempty"`
	PayloadB64       string          `json:"payload_b64,omitempty"`
}

func toLiveLine(v live.Value) liveLine {
	l := liveLine{Type: "live", Agent: v.Agent, Stream: v.Stream, Drone: v.Drone, Writer: v.Writer,
		Segment: localstream.SegmentID(v.Segment).String(), Offset: v.Offset, EventTimeNs: v.EventTimeNs,
		IngestTimeNs: v.IngestTimeNs, SentTimeNs: v.SentTimeNs, AgeSeconds: v.Age.Seconds(), Keyframe: v.Keyframe,
		Covered: v.Covered, CommittedLowerNs: v.CommittedLowerNs, ContentType: v.ContentType}
	// As `read` does: JSON only when it is valid JSON and valid UTF-8.
	if strings.Contains(v.ContentType, "json") && json.Valid(v.Payload) && utf8.Valid(v.Payload) {
		l.Payload = v.Payload
	} else {
		l.PayloadB64 = base64.StdEncoding.EncodeToString(v.Payload)
	}
	return l
}

// readLive prints the latest live value of every drone that matches.
func readLive(ctx context.Context, conn *centralConn, stream, agent, drone string, stdout io.Writer) error {
	if stream != "" {
		if err := localstream.ValidateStreamName(stream); err != nil {
			return usagef("--stream: %v", err)
		}
	}
	nc, err := conn.connect("edge-agent-read")
	if err != nil {
		return err
	}
	defer nc.Close()
	vals, err := live.Read(ctx, nc, live.ReadOptions{Agent: agent, Stream: stream, Drone: drone})
	if errors.Is(err, live.ErrNoLiveStream) {
		return fmt.Errorf("read --live: %w (is live.enabled on, and has the agent reached this centre?)", err)
	}
	if err != nil {
		return fmt.Errorf("read --live: %w", err)
	}
	enc := json.NewEncoder(stdout)
	for _, v := range vals {
		if err := enc.Encode(toLiveLine(v)); err != nil {
			return err
		}
	}
	return nil
}
