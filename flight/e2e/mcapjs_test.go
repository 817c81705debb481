package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/flight"
	"github.com/edge-agent/edge-agent/internal/testkit"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/video"
)

// mcapJSDir prepares the npm reader of testdata/mcap-js (@mcap/core,
// fzstd and protobufjs pinned by its lock file).
func mcapJSDir(t *testing.T) string {
	return testkit.NPMDir(t, filepath.Join("testdata", "mcap-js"), "@mcap/core/package.json", "read.mjs")
}

// jsRead is what read.mjs prints.
type jsRead struct {
	Channels map[string]struct {
		Encoding       string `json:"encoding"`
		Schema         string `json:"schema"`
		SchemaEncoding string `json:"schema_encoding"`
	} `json:"channels"`
	IndexedCounts   map[string]int `json:"indexed_counts"`
	IndexedMessages int            `json:"indexed_messages"`
	Attachments     []string       `json:"attachments"`
	Metadata        []string       `json:"metadata"`
	Stream          map[string]struct {
		Messages    int  `json:"messages"`
		LogMonotone bool `json:"log_monotone"`
	} `json:"stream"`
	VideoFiles []struct {
		Path        string `json:"path"`
		AccessUnits int    `json:"access_units"`
	} `json:"video_files"`
}

// checkWithMCAPJS reads the record with Foxglove's JavaScript MCAP
// library and checks it against the centre, read here on its own: the
// channels and their schemas, every message count equal to what the
// centre holds for the flight, log times monotone on every channel, and
// the video's access units decoded by ffprobe.
func checkWithMCAPJS(t *testing.T, nc *nats.Conn, path string, f flight.Flight) {
	dir := mcapJSDir(t)
	outDir := t.TempDir()
	cmd := exec.Command("node", filepath.Join(dir, "read.mjs"), path, outDir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node read.mjs: %v", err)
	}
	var js jsRead
	if err := json.Unmarshal(out, &js); err != nil {
		t.Fatalf("read.mjs printed %q: %v", out, err)
	}
	want := map[string][3]string{
		"/video/" + testDrone:    {"protobuf", "foxglove.CompressedVideo", "protobuf"},
		"/position/" + testDrone: {"json", "foxglove.LocationFix", "jsonschema"},
		"/mavlink/" + testDrone:  {"mavlink", "", ""},
		"/health/" + testAgent:   {"json", "edge.Telemetry", "jsonschema"},
		flight.TopicEvents:       {"json", "edge.flight.Entry", "jsonschema"},
	}
	for topic, w := range want {
		ch, ok := js.Channels[topic]
		if !ok || ch.Encoding != w[0] || ch.Schema != w[1] || ch.SchemaEncoding != w[2] {
			t.Errorf("channel %s = %+v, want encoding %s schema %q (%s)", topic, ch, w[0], w[1], w[2])
		}
	}
	total := 0
	for topic, s := range js.Stream {
		if !s.LogMonotone {
			t.Errorf("channel %s: log times go back in file order", topic)
		}
		if js.IndexedCounts[topic] != s.Messages {
			t.Errorf("channel %s: statistics %d, read %d", topic, js.IndexedCounts[topic], s.Messages)
		}
		total += s.Messages
	}
	if js.IndexedMessages != total {
		t.Errorf("the index reaches %d messages of %d", js.IndexedMessages, total)
	}
	if len(js.Attachments) != 1 || js.Attachments[0] != flight.CertificateName || len(js.Metadata) != 1 || js.Metadata[0] != "flight" {
		t.Errorf("attachments %v, metadata %v", js.Attachments, js.Metadata)
	}
	// The centre, read on its own: MAVLink frames, video frames and
	// health samples of the flight's window.
	centre := centreCounts(t, nc, f)
	for topic, n := range centre {
		if js.Stream[topic].Messages != n {
			t.Errorf("channel %s: %d messages in the file, the centre holds %d", topic, js.Stream[topic].Messages, n)
		}
	}
	if len(js.VideoFiles) != 1 {
		t.Fatalf("video files %+v", js.VideoFiles)
	}
	frames, err := ffprobeFrames(js.VideoFiles[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if frames != js.VideoFiles[0].AccessUnits || frames < 100 {
		t.Errorf("ffprobe decoded %d frames of %d access units", frames, js.VideoFiles[0].AccessUnits)
	}
	t.Logf("@mcap/core read %d messages on %d channels; ffprobe decoded %d frames; centre %v", total, len(js.Channels), frames, centre)
}

// centreCounts reads the centre directly for the flight's window.
func centreCounts(t *testing.T, nc *nats.Conn, f flight.Flight) map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]int{}
	for _, s := range []struct{ stream, key, topic string }{
		{"telemetry", f.Drone, "/mavlink/" + f.Drone}, {"video", f.Drone, "/video/" + f.Drone}, {"health", f.Agent, "/health/" + f.Agent}} {
		items, err := centralread.ReadAll(ctx, nc, s.stream, centralread.ReadOptions{Agent: f.Agent, RoutingKey: s.key})
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		for _, it := range items {
			rec := it.Event.Record
			if it.Kind != centralread.ItemEvent || rec.RoutingKey != s.key || eventTime(&rec) < f.StartNs || eventTime(&rec) > f.EndNs {
				continue
			}
			switch {
			case rec.ContentType == mavlink.ContentType:
				out[s.topic]++
			case strings.HasPrefix(rec.ContentType, "video/"):
				c, err := video.DecodeChunk(rec.Event)
				if err != nil {
					t.Fatal(err)
				}
				out[s.topic] += len(c.Frames)
			case s.stream == "health":
				out[s.topic]++
			}
		}
	}
	return out
}

// ffprobeFrames has ffprobe decode an elementary stream and count frames.
func ffprobeFrames(path string) (int, error) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		return 0, errors.New("ffprobe not installed (.ci/run installs ffmpeg)")
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path).CombinedOutput()
	if err != nil {
		return 0, errors.New(string(out))
	}
	return strconv.Atoi(strings.TrimSpace(strings.Split(string(out), "\n")[0]))
}
