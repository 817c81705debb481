package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContradictingLimitsRefused (issue 30.4): limits that contradict
// each other, or only waste memory, are refused at start with the field
// to change. On main the agent started silently with each of them.
func TestContradictingLimitsRefused(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"telemetry: {max_payload: 1073741824}", "telemetry.max_payload: 1073741824 (+ 65536 of topic) is above store.max_event_bytes 4194304"},
		{"telemetry: {max_payload: 4194304}", "telemetry.max_payload: 4194304 (+ 65536 of topic) is above store.max_event_bytes"},
		{"telemetry: {max_payload: 1048576, max_buffered_bytes: 65536}", "telemetry.max_buffered_bytes: 65536 is below telemetry.max_payload 1048576"},
		{"telemetry: {lane_depth: 100000000}", "telemetry.lane_depth: 100000000: at most 65536"},
		{"store: {queue_depth: 100000000}", "store.queue_depth: 100000000: at most 1048576"},
		{"store: {max_event_bytes: 1048576}\nvideo: {chunk_max_bytes: 2097152}", "video.chunk_max_bytes: 2097152 is above store.max_event_bytes 1048576"},
		{"central: {max_txn_bytes: 1}", "central.max_txn_bytes: 1: at least 65536"},
		{"central: {commit_interval: 1ns}", "central.commit_interval: 1ns: at least 1ms"},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "a.yaml")
		os.WriteFile(path, []byte("data_dir: /tmp/x\n"+c.yaml+"\n"), 0o644)
		cfg, err := LoadConfig(path)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant containing %q", c.yaml, err, c.want)
		}
	}
	// The defaults, and raising both sides together, pass.
	for _, ok := range []string{"", "store: {max_event_bytes: 16777216}\ntelemetry: {max_payload: 8388608, max_buffered_bytes: 33554432}\nvideo: {chunk_max_bytes: 4194304}"} {
		path := filepath.Join(t.TempDir(), "a.yaml")
		os.WriteFile(path, []byte("data_dir: /tmp/x\n"+ok+"\n"), 0o644)
		cfg, err := LoadConfig(path)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}
