package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edge-agent/edge-agent/localstream"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	if code, _, msg := run(t, "no-such-command"); code != 2 || !strings.Contains(msg, "unknown command") {
		t.Fatalf("unknown command: %d %q", code, msg)
	}
	if code, _, _ := run(t); code != 2 {
		t.Fatalf("no command: %d", code)
	}
	if code, out, _ := run(t, "version"); code != 0 || !strings.HasPrefix(out, "edge-agent ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, msg := run(t, "streams"); code != 2 || !strings.Contains(msg, "--data-dir or --config is required") {
		t.Fatalf("streams without --data-dir: %d %q", code, msg)
	}
	if code, _, _ := run(t, "streams", "--bogus"); code != 2 {
		t.Fatalf("bad flag: %d", code)
	}
	if code, _, msg := run(t, "streams", "--data-dir", t.TempDir()); code != 2 || !strings.Contains(msg, "no store") {
		t.Fatalf("empty data dir: %d %q", code, msg)
	}
}

func TestStreamsCommand(t *testing.T) {
	dir := t.TempDir()
	s, err := localstream.Open(filepath.Join(dir, "store"), localstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.CreateStream("telemetry", localstream.StreamConfig{})
	for range 3 {
		if _, err := st.Append(context.Background(), localstream.Event{RoutingKey: "d1", Writer: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Split(0, 2); err != nil {
		t.Fatal(err)
	}
	if err := st.SetCommittedCut("central", st.TailCut()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	code, out, msg := run(t, "streams", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("streams: %d %s", code, msg)
	}
	// The same through the config file an operator has at hand.
	cfgFile := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfgFile, []byte("data_dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, byConfig, msg := run(t, "streams", "--config", cfgFile)
	if code != 0 || !strings.Contains(byConfig, "committed[central] telemetry:1.1=0,1.2=0  backlog 0 events") {
		t.Fatalf("streams --config: %d %s\n%s", code, msg, byConfig)
	}
	for _, want := range []string{"stream telemetry", "0.0", "sealed", "1.1", "committed[central] telemetry:1.1=0,1.2=0  backlog 0 events", "tail telemetry:1.1=0,1.2=0", "watermark "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
