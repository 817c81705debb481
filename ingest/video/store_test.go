package video

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// TestStoreEndToEnd replays both captures at once, as two drones, over UDP
// into a real localstream.Store (Badger in a temp dir, fsync'd appends,
// two segments), then reads the stream back: each drone's chunks come out
// in order with every frame, keyframe and PTS of its capture; every writer
// mark names a durable position holding the chunk whose last frame it
// notes; the concatenated payloads decode.
func TestStoreEndToEnd(t *testing.T) {
	store, err := localstream.Open(t.TempDir(), localstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	st, err := store.CreateStream("video", localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}})
	if err != nil {
		t.Fatal(err)
	}
	caps := []capture{loadCapture(t, "h264", CodecH264), loadCapture(t, "h265", CodecH265)}
	cfg := NewDefaultConfig()
	cfg.Drones = []DroneConfig{
		{ID: "drone-264", SSRC: 0x264, Codec: CodecH264, PayloadType: 96, Fmtp: caps[0].fmtp},
		{ID: "drone-265", SSRC: 0x265, Codec: CodecH265, PayloadType: 96, Fmtp: caps[1].fmtp},
	}
	marks := &recordMarks{}
	in, addr := startIngest(t, cfg, Sink{Stream: st, Marks: marks})
	var wg sync.WaitGroup
	sent := 0
	for i, c := range caps {
		sent += len(c.pkts)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := replay.SendPackets(context.Background(), c.pkts, c.port, addr,
				replay.Options{Speed: speed(t, in, 4), Mux: true, SSRC: cfg.Drones[i].SSRC})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	testkit.WaitFor(t, 10*time.Second, "datagrams", func() bool { return in.Stats().Datagrams >= uint64(sent) })
	stopIngest(in)

	tail := st.TailCut()
	r, err := st.NewReader(st.HeadCut(), &tail)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	evs := map[string][]localstream.Event{}
	at := map[localstream.Position]localstream.Event{}
	for {
		rec, err := r.Next(context.Background())
		if errors.Is(err, localstream.ErrEndOfCut) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs[rec.RoutingKey] = append(evs[rec.RoutingKey], rec.Event)
		at[rec.Position] = rec.Event
	}
	for i, c := range caps {
		id := cfg.Drones[i].ID
		got := decodeAll(t, evs[id])
		checkFramesAs(t, c, got, expectedPTS(c.pkts), id)
		ffprobeDecodes(t, c.codec, got.stream, len(c.frames))
	}
	if len(marks.notes) != len(at) {
		t.Fatalf("%d marks for %d chunks", len(marks.notes), len(at))
	}
	for i, p := range marks.pos {
		ev, ok := at[p]
		if !ok {
			t.Fatalf("mark %d at %v: no such record", i, p)
		}
		ch, err := DecodeChunk(ev)
		if err != nil || ch.Frames[len(ch.Frames)-1].PTS != marks.notes[i] {
			t.Fatalf("mark %d at %v notes %d, chunk there ends at %v (%v)", i, p, marks.notes[i], ch, err)
		}
	}
	if s := in.Stats(); s.Chunks != uint64(len(at)) || s.AppendErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
}
