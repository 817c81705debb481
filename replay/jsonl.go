package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/schollz/progressbar/v3"
)

// TelemetryRecord is one line of a JSONL telemetry recording: one MQTT
// message as it was published.
//
//	{"time":"2026-11-29T15:31:58.123456789Z","topic":"drones/drone-1/telemetry","qos":1,"payload":{...}}
//	{"time":"...","topic":"drones/drone-1/mavlink","payload_b64":"/QkAAA..."}
//
// A JSON payload is kept as is in "payload"; any other payload (MAVLink
// frames, text) is base64 in "payload_b64". "qos" defaults to 1.
type TelemetryRecord struct {
	Time       time.Time       `json:"time"`
	Topic      string          `json:"topic"`
	QoS        *byte           `json:"qos,omitempty"`
	Retain     bool            `json:"retain,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	PayloadB64 []byte          `json:"payload_b64,omitempty"`
}

// Bytes returns the message payload.
func (r TelemetryRecord) Bytes() []byte {
	if r.PayloadB64 != nil {
		return r.PayloadB64
	}
	return r.Payload
}

// NewTelemetryRecord builds the record of one published message.
func NewTelemetryRecord(t time.Time, topic string, qos byte, payload []byte) TelemetryRecord {
	r := TelemetryRecord{Time: t.UTC(), Topic: topic, QoS: &qos}
	if json.Valid(payload) {
		r.Payload = append(json.RawMessage(nil), payload...)
	} else {
		r.PayloadB64 = append([]byte(nil), payload...)
	}
	return r
}

// maxJSONLLine bounds one line of a recording.
const maxJSONLLine = 4 << 20

// ReadJSONL reads a telemetry recording. Lines that are not valid records
// (bad JSON, no topic, no time, a topic with wildcards, both or neither
// payload forms) are skipped and counted; an unreadable file is an error.
func ReadJSONL(r io.Reader) (recs []TelemetryRecord, skipped int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxJSONLLine)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var rec TelemetryRecord
		if json.Unmarshal(line, &rec) != nil || !validRecord(rec) {
			skipped++
			continue
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return recs, skipped, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return recs, skipped, nil
}

// validRecord: a topic without wildcards, a time, exactly one payload form, QoS ≤ 2.
func validRecord(r TelemetryRecord) bool {
	if r.Topic == "" || r.Time.IsZero() || (r.Payload != nil) == (r.PayloadB64 != nil) {
		return false
	}
	for _, c := range r.Topic {
		if c == '+' || c == '#' || c == 0 {
			return false
		}
	}
	return r.QoS == nil || *r.QoS <= 2
}

// TelemetryOptions configure SendTelemetry.
type TelemetryOptions struct {
	// Speed is the timing factor: 1 = the recording's own spacing, 2 =
	// twice as fast; 0 = as fast as the broker acknowledges.
	Speed float64
	// ClientID of the publisher. Default "edge-replay-<pid>".
	ClientID string
	// Progress, when set, receives a progress bar.
	Progress io.Writer
}

// TelemetrySummary says what SendTelemetry published.
type TelemetrySummary struct {
	// Published messages (acknowledged by the broker for QoS ≥ 1).
	Published int
	// Bytes of payload.
	Bytes int64
	// Span is the recording's time span; Elapsed how long sending took.
	Span, Elapsed time.Duration
}

func (s TelemetrySummary) String() string {
	return fmt.Sprintf("%d messages, %d payload bytes, recording span %s, sent in %s",
		s.Published, s.Bytes, s.Span.Round(time.Millisecond), s.Elapsed.Round(time.Millisecond))
}

// SendTelemetryFile reads a JSONL recording and publishes it.
func SendTelemetryFile(ctx context.Context, path, broker string, opts TelemetryOptions) (TelemetrySummary, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return TelemetrySummary{}, 0, err
	}
	defer f.Close()
	recs, skipped, err := ReadJSONL(f)
	if err != nil {
		return TelemetrySummary{}, skipped, err
	}
	if len(recs) == 0 {
		return TelemetrySummary{}, skipped, fmt.Errorf("%w: %s holds no telemetry record", ErrFormat, path)
	}
	sum, err := SendTelemetry(ctx, recs, broker, opts)
	return sum, skipped, err
}

// SendTelemetry publishes the records to an MQTT broker in order, with the
// recording's timing scaled by Speed (or as fast as possible), waiting for
// the broker's acknowledgement of each QoS ≥ 1 message.
func SendTelemetry(ctx context.Context, recs []TelemetryRecord, broker string, opts TelemetryOptions) (TelemetrySummary, error) {
	var sum TelemetrySummary
	if len(recs) == 0 {
		return sum, nil
	}
	if opts.ClientID == "" {
		opts.ClientID = fmt.Sprintf("edge-replay-%d", os.Getpid())
	}
	co := paho.NewClientOptions().AddBroker(broker).SetClientID(opts.ClientID).SetCleanSession(true).
		SetConnectTimeout(10 * time.Second).SetAutoReconnect(true).SetOrderMatters(true)
	c := paho.NewClient(co)
	if tok := c.Connect(); !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
		return sum, fmt.Errorf("%w: mqtt %s: %v", ErrTarget, broker, tok.Error())
	}
	defer c.Disconnect(250)
	bar := newBar(opts.Progress, len(recs), "telemetry")
	start, first := time.Now(), recs[0].Time
	sum.Span = recs[len(recs)-1].Time.Sub(first)
	for _, r := range recs {
		if opts.Speed > 0 {
			due := start.Add(time.Duration(float64(r.Time.Sub(first)) / opts.Speed))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return sum, ctx.Err()
				case <-time.After(d):
				}
			}
		}
		qos := byte(1)
		if r.QoS != nil {
			qos = *r.QoS
		}
		tok := c.Publish(r.Topic, qos, r.Retain, r.Bytes())
		for !tok.WaitTimeout(time.Second) {
			if ctx.Err() != nil {
				return sum, ctx.Err()
			}
		}
		if err := tok.Error(); err != nil {
			return sum, fmt.Errorf("replay: publish %s: %w", r.Topic, err)
		}
		sum.Published++
		sum.Bytes += int64(len(r.Bytes()))
		bar.Add(1)
	}
	bar.Finish()
	sum.Elapsed = time.Since(start)
	return sum, nil
}

// newBar returns a progress bar on w, or a silent one when w is nil.
func newBar(w io.Writer, n int, what string) *progressbar.ProgressBar {
	if w == nil {
		return progressbar.DefaultSilent(int64(n))
	}
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond))
}
