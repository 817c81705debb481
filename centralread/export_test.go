package centralread

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

// TestExportVideoStartsAtKeyframe: export from T1 to T2 starts at the
// keyframe chunk at or before T1 and ends with the last chunk at or before
// T2, bytes exactly the chunks' payloads in order.
func TestExportVideoStartsAtKeyframe(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	store := rigs.OpenStore(t, t.TempDir(), localstream.Options{})
	st, err := store.CreateStream("video", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	var chunks [][]byte
	for i := range 30 {
		for _, d := range []string{"d1", "d2"} {
			ev := localstream.Event{RoutingKey: d, Writer: "video/" + d, EventTime: int64(1000 + i*100), ContentType: "video/h264",
				Headers: []localstream.Header{{Key: "frame-pts", Value: fmt.Sprint(1000 + i*100)}},
				Payload: fmt.Appendf(nil, "\x00\x00\x00\x01%s-chunk-%d;", d, i)}
			if i%5 == 0 {
				ev.Flags |= localstream.FlagKeyframe
			}
			if _, err := st.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
			if d == "d1" {
				chunks = append(chunks, ev.Payload)
			}
		}
	}
	nc := connect(t, srv.ClientURL())
	rp := startReplica(t, nc, st, "agent-v", replicate.ReplicatorConfig{Watermark: func(localstream.StreamCut) (watermark.Watermark, error) { return watermark.Watermark{}, nil }}, replicate.JetStreamOptions{})
	testkit.WaitFor(t, 10*time.Second, "replication", func() bool { return rp.r.Stats().BacklogEvents == 0 && rp.r.Stats().Txns > 0 })
	rp.close()
	var out bytes.Buffer
	// T1 = 1750 → chunk 7 is the first after... keyframe at or before: chunk 5 (1500).
	stats, err := ExportVideo(ctx, nc, ExportOptions{Drone: "d1", FromNs: 1750, ToNs: 2300}, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Join(chunks[5:14], nil) // chunks 5..13 (1500..2300)
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("export:\n got %q\nwant %q", out.Bytes(), want)
	}
	if stats.StartedAtKeyNs != 1500 || stats.Chunks != 9 {
		t.Fatalf("stats %+v", stats)
	}
}

// TestExportVideoSeveralAgents (issue 30.8): without --agent, a drone's
// video captured by two agents is refused with ErrSeveralAgents naming
// both, not merged into one clip; with the agent named it exports that
// agent's chunks only.
//
// Failed before: "export merged 2 agents: 40 chunks".
func TestExportVideoSeveralAgents(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	ctx := testCtx(t, 30*time.Second)
	own := map[string][][]byte{}
	for _, agent := range []string{"agent-b", "agent-a"} {
		st, err := rigs.OpenStore(t, t.TempDir(), localstream.Options{}).CreateStream("video", localstream.StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			ev := localstream.Event{RoutingKey: "d1", Writer: "video/d1", EventTime: int64(1000 + i*100), ContentType: "video/h264",
				Payload: fmt.Appendf(nil, "\x00\x00\x00\x01%s-chunk-%d;", agent, i)}
			if i%5 == 0 {
				ev.Flags |= localstream.FlagKeyframe
			}
			if _, err := st.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
			own[agent] = append(own[agent], ev.Payload)
		}
		rp := startReplica(t, nc, st, agent, replicate.ReplicatorConfig{Watermark: func(localstream.StreamCut) (watermark.Watermark, error) { return watermark.Watermark{}, nil }}, replicate.JetStreamOptions{})
		testkit.WaitFor(t, 10*time.Second, "replication", func() bool { return rp.r.Stats().BacklogEvents == 0 && rp.r.Stats().Txns > 0 })
		rp.close()
	}
	var out bytes.Buffer
	st, err := ExportVideo(ctx, nc, ExportOptions{Drone: "d1", FromNs: 0, ToNs: 5000}, &out)
	if err == nil {
		t.Fatalf("export merged 2 agents: %d chunks", st.Chunks)
	}
	if !errors.Is(err, ErrSeveralAgents) || !strings.Contains(err.Error(), "agent-a, agent-b") {
		t.Fatalf("export of two agents' drone: %v, want ErrSeveralAgents naming agent-a, agent-b", err)
	}
	t.Logf("without an agent: %v", err)
	out.Reset()
	if _, err := ExportVideo(ctx, nc, ExportOptions{Agent: "agent-a", Drone: "d1", FromNs: 0, ToNs: 5000}, &out); err != nil {
		t.Fatal(err)
	}
	if want := bytes.Join(own["agent-a"], nil); !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("export of agent-a:\n got %q\nwant %q", out.Bytes(), want)
	}
}
