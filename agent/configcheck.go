package agent

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
)

// checkTopics checks the topic patterns and the time unit, naming the key once:
// `config: telemetry.topics: "drones/x": no drone level: ...`.
func (t TelemetryConfig) checkTopics() error {
	check := func(key, pattern string) error {
		_, err := telemetry.ParsePattern(pattern)
		var pe *telemetry.PatternError
		if errors.As(err, &pe) {
			return fmt.Errorf("%w: %s: %q: %s", ErrConfig, key, pe.Pattern, pe.Reason)
		}
		return err
	}
	for _, p := range t.Topics {
		if err := check("telemetry.topics", p); err != nil {
			return err
		}
	}
	if t.StatusTopic != "" {
		if err := check("telemetry.status_topic", t.StatusTopic); err != nil {
			return err
		}
	}
	if _, err := telemetry.ParseTimeUnit(string(t.TimeUnit)); err != nil {
		return fmt.Errorf("%w: telemetry.time_unit: %q: want auto, s, ms, us or ns", ErrConfig, t.TimeUnit)
	}
	return nil
}

// checkFiles makes sure that every credential and TLS file the
// configuration names can be read, and that a named password variable is
// set, so that a typo exits at start (status 2) naming the YAML key rather
// than failing later in a reconnect loop.
func (c Config) checkFiles() error {
	type file struct{ key, path string }
	var files []file
	if c.Telemetry.Enabled {
		t := c.Telemetry
		files = append(files, file{"telemetry.password_file", t.PasswordFile}, file{"telemetry.ca_file", t.CAFile},
			file{"telemetry.cert_file", t.CertFile}, file{"telemetry.key_file", t.KeyFile})
		if t.PasswordEnv != "" {
			if _, ok := os.LookupEnv(t.PasswordEnv); !ok {
				return fmt.Errorf("%w: telemetry.password_env: environment variable %s is not set", ErrConfig, t.PasswordEnv)
			}
		}
	}
	if c.Central.URL != "" {
		ce := c.Central
		files = append(files, file{"central.creds_file", ce.CredsFile}, file{"central.nkey_seed_file", ce.NkeySeedFile},
			file{"central.password_file", ce.PasswordFile}, file{"central.ca_file", ce.CAFile},
			file{"central.cert_file", ce.CertFile}, file{"central.key_file", ce.KeyFile})
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		fh, err := os.Open(f.path)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConfig, f.key, err)
		}
		fh.Close()
	}
	return nil
}

// nested puts the error of a part's own validation under its YAML key,
// naming the part once: "video: video: invalid config: listen: …" becomes
// "video: listen: …".
func nested(key string, err, partConfig error) error {
	msg := strings.TrimPrefix(err.Error(), partConfig.Error()+": ")
	return fmt.Errorf("%w: %s: %s", ErrConfig, key, msg)
}

// Bounds of settings that contradict no other but only waste: a deeper
// queue is allocated at start and bounds nothing the byte limits do not;
// a commit every nanosecond or of a few bytes is a round trip to the
// centre per event.
const (
	maxLaneDepth      = 65536
	maxQueueDepth     = 1 << 20
	minCommitInterval = time.Millisecond
	minTxnBytes       = 64 << 10
	// topicOverhead is what a telemetry event holds beside its payload
	// (the topic header, at most an MQTT string).
	topicOverhead = 64 << 10
)

// checkLimits refuses limits that contradict each other or cannot work,
// naming the field to change: a part that accepts more than the store can
// hold drops it all (counted, but silently to an operator), a bound that
// is never reached only costs memory at start.
func (c Config) checkLimits() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	maxEvent := c.Store.MaxEventBytes
	if maxEvent <= 0 {
		maxEvent = NewDefaultConfig().Store.MaxEventBytes
	}
	if c.Store.QueueDepth > maxQueueDepth {
		return bad("store.queue_depth", "%d: at most %d (each slot is allocated at start; memory is bounded by the intakes' byte limits)", c.Store.QueueDepth, maxQueueDepth)
	}
	if t := c.Telemetry; t.Enabled {
		def := telemetry.NewDefaultConfig()
		payload, budget := cmp.Or(t.MaxPayload, def.MaxPayload), cmp.Or(t.MaxBufferedBytes, def.MaxBufferedBytes)
		if payload+topicOverhead > maxEvent {
			return bad("telemetry.max_payload", "%d (+ %d of topic) is above store.max_event_bytes %d: every message above it would be dropped; lower telemetry.max_payload or raise store.max_event_bytes", payload, topicOverhead, maxEvent)
		}
		if budget < payload {
			return bad("telemetry.max_buffered_bytes", "%d is below telemetry.max_payload %d: raise max_buffered_bytes or lower max_payload", budget, payload)
		}
		if t.LaneDepth > maxLaneDepth {
			return bad("telemetry.lane_depth", "%d: at most %d (the bytes held are bounded by telemetry.max_buffered_bytes; a deeper lane only costs memory at start)", t.LaneDepth, maxLaneDepth)
		}
	}
	if c.Video.Enabled && c.Video.ChunkMaxBytes > maxEvent {
		return bad("video.chunk_max_bytes", "%d is above store.max_event_bytes %d: every chunk would be refused by the store; lower video.chunk_max_bytes or raise store.max_event_bytes", c.Video.ChunkMaxBytes, maxEvent)
	}
	if ce := c.Central; ce.MaxTxnBytes > 0 && ce.MaxTxnBytes < minTxnBytes {
		return bad("central.max_txn_bytes", "%d: at least %d (0 = the default, 8 MiB): each transaction would hold about one event, a round trip to the centre per event", ce.MaxTxnBytes, minTxnBytes)
	}
	if ce := c.Central; ce.CommitInterval > 0 && ce.CommitInterval < minCommitInterval {
		return bad("central.commit_interval", "%v: at least %v (each commit is a round trip to the centre)", ce.CommitInterval, minCommitInterval)
	}
	return nil
}
