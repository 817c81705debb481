package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/unpack"
	"github.com/edge-agent/edge-agent/wire"
)

// TestCentralUnpackStatusAndSkip: `central unpack` stops at a source pack
// of a version it does not know and says so on --status's /status; run
// again with --skip SEQ it writes the skip marker in its place.
func TestCentralUnpackStatusAndSkip(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wire.StreamName("telemetry"), Subjects: []string{"edge.telemetry.>"}}); err != nil {
		t.Fatal(err)
	}
	// A pack whose envelope says version 3.
	pack := []byte{0xE2, 0x01}
	pack = binary.LittleEndian.AppendUint32(pack, 0x184D2A5E)
	pack = binary.LittleEndian.AppendUint32(pack, 5)
	pack = append(pack, 3, 0, 0, 0, 0, 0x28, 0xB5, 0x2F, 0xFD)
	if _, err := js.Publish(ctx, wire.CutSubject("telemetry", "gs-1"), pack); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (stop func(), out *testkit.SyncBuffer) {
		out = &testkit.SyncBuffer{}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- runCentralUnpack(rctx, append([]string{"--central", srv.ClientURL(), "--stream", "telemetry"}, args...), out, &testkit.SyncBuffer{})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("central unpack %v: %v", args, err)
			}
		}, out
	}
	stop, out := run("--status", "127.0.0.1:0")
	var url string
	addr := regexp.MustCompile(`status on (http://\S+)`)
	testkit.WaitFor(t, 10*time.Second, "the status address", func() bool {
		m := addr.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	var blockedErr string
	testkit.WaitFor(t, 30*time.Second, "/status to say blocked", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var raw map[string][]map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil || len(raw["streams"]) != 1 {
			return false
		}
		s := raw["streams"][0]
		blockedErr, _ = s["error"].(string)
		return s["state"] == "blocked" && s["blocked_seq"] == 1.0
	})
	if !strings.Contains(blockedErr, "pack version 3") {
		t.Fatalf("/status error %q", blockedErr)
	}
	stop()

	stop, _ = run("--skip", "1")
	defer stop()
	testkit.WaitFor(t, 30*time.Second, "the skip marker", func() bool {
		st, err := js.Stream(ctx, unpack.DerivedStreamName("telemetry"))
		return err == nil && st.CachedInfo().State.LastSeq == 1
	})
	st, err := js.Stream(ctx, unpack.DerivedStreamName("telemetry"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := unpack.Decode(m.Subject, m.Header, m.Data)
	if err != nil || m.Header.Get(unpack.HdrSourceSkipped) != "1" || ev.Seq != 1 || !strings.Contains(ev.Dropped, "(--skip 1)") || ev.Agent != "gs-1" {
		t.Fatalf("skip marker %s %v: %+v %v", m.Subject, m.Header, ev, err)
	}
}

// TestCentralUnpackPartitionFlags: a partition count or index out of
// range is a usage error (exit 2) that names the flag, before any
// connection.
func TestCentralUnpackPartitionFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"central", "unpack", "--partitions", "0"}, "--partitions 0: want 1..64"},
		{[]string{"central", "unpack", "--partitions", "65"}, "--partitions 65: want 1..64"},
		{[]string{"central", "unpack", "--partitions", "3", "--partition", "3"}, "--partition 3: want 0..2"},
		{[]string{"central", "unpack", "--partition", "1"}, "--partition 1: want 0..0"},
		{[]string{"central", "--data-dir", t.TempDir(), "--unpack", "--unpack-partitions", "0"}, "--unpack-partitions 0: want 1..64"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runMain(context.Background(), c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Fatalf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}
