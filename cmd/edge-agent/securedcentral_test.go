package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

// TestCentralToolsOnSecuredCentre (issue 41.7): `read`, `export`, `cut`
// and `central unpack` reach a centre that requires TLS verified with a
// CA, a client certificate and a creds file — given as flags, as the nats
// CLI's environment variables and as a nats CLI context — and without
// credentials they are refused with the server's reason.
//
// Failed before: "read: exit 2: flag provided but not defined: -creds".
func TestCentralToolsOnSecuredCentre(t *testing.T) {
	sc := rigs.StartSecuredCentral(t)
	const agent, drone, chunks = "gs-sec", "d1", 20
	seedSecured(t, sc, agent, drone, chunks)
	tlsFlags := []string{"--tlsca", sc.CAFile, "--tlscert", sc.CertFile, "--tlskey", sc.KeyFile}
	flags := append([]string{"--central", sc.URL, "--creds", sc.CredsFile}, tlsFlags...)

	// read, with flags.
	code, out, msg := run(t, append([]string{"read", "--stream", "video", "--agent", agent}, flags...)...)
	if code != 0 || strings.Count(out, `"type":"event"`) != chunks {
		t.Fatalf("read: exit %d: %s (%d events, want %d)", code, msg, strings.Count(out, `"type":"event"`), chunks)
	}

	// export video, with the nats CLI's environment variables.
	t.Setenv("NATS_URL", sc.URL)
	t.Setenv("NATS_CREDS", sc.CredsFile)
	t.Setenv("NATS_CA", sc.CAFile)
	t.Setenv("NATS_CERT", sc.CertFile)
	t.Setenv("NATS_KEY", sc.KeyFile)
	clip := filepath.Join(t.TempDir(), "out.h264")
	code, out, msg = run(t, "export", "video", "--drone", drone, "--from", "1000", "--to", fmt.Sprint(1000+chunks*100), "-o", clip)
	if b, _ := os.ReadFile(clip); code != 0 || !bytes.Contains(b, []byte("chunk-19;")) {
		t.Fatalf("export video: exit %d: %s %s (%d bytes)", code, out, msg, len(b))
	}
	for _, k := range []string{"NATS_URL", "NATS_CREDS", "NATS_CA", "NATS_CERT", "NATS_KEY"} {
		os.Unsetenv(k)
	}

	// cut, with a nats CLI context (its JSON field names).
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	ctxDoc, _ := json.Marshal(map[string]string{"description": "secured test centre", "url": sc.URL, "creds": sc.CredsFile,
		"ca": sc.CAFile, "cert": sc.CertFile, "key": sc.KeyFile})
	os.MkdirAll(filepath.Join(cfgHome, "nats", "context"), 0o755)
	if err := os.WriteFile(filepath.Join(cfgHome, "nats", "context", "sec.json"), ctxDoc, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, msg = run(t, "cut", "--context", "sec", "--at", "1500", "--agent", agent, "--stream", "video")
	var c cutOutput
	if err := json.Unmarshal([]byte(out), &c); code != 0 || err != nil || !c.Complete || len(c.Starts) != 1 || c.Starts[0].StartSeq == 0 {
		t.Fatalf("cut: exit %d: %s %s (%v)", code, out, msg, err)
	}

	// central unpack, with flags: the derived stream fills.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var uout, uerr testkit.SyncBuffer
	go func() {
		done <- runMain(ctx, append([]string{"central", "unpack", "--stream", "video"}, flags...), &uout, &uerr)
	}()
	nc := connectSecured(t, sc)
	js, _ := jetstream.New(nc)
	testkit.WaitFor(t, 30*time.Second, "EDGEEV_VIDEO holds every chunk", func() bool {
		s, err := js.Stream(context.Background(), "EDGEEV_VIDEO")
		return err == nil && s.CachedInfo().State.Msgs >= chunks
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("central unpack: exit %d: %s", code, uerr.String())
	}

	// Without credentials: refused, and the error says why.
	code, _, msg = run(t, append([]string{"read", "--stream", "video", "--central", sc.URL}, tlsFlags...)...)
	if code == 0 || !strings.Contains(strings.ToLower(msg), "authorization") {
		t.Fatalf("read without creds: exit %d %q", code, msg)
	}
}

// connectSecured connects as the agent does, with every file of sc.
func connectSecured(t *testing.T, sc *rigs.SecuredCentral) *nats.Conn {
	t.Helper()
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: []string{sc.URL}, CAFile: sc.CAFile, CertFile: sc.CertFile,
		KeyFile: sc.KeyFile, CredsFile: sc.CredsFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	testkit.WaitFor(t, 10*time.Second, "connected to the secured centre", nc.IsConnected)
	return nc
}

// seedSecured replicates n video chunks of drone (a keyframe every 5th,
// event times 1000, 1100, ...) of agent into sc with the real replicator,
// connected as the agent connects; the watermark of every commit is past
// the last chunk.
func seedSecured(t *testing.T, sc *rigs.SecuredCentral, agent, drone string, n int) {
	t.Helper()
	_, st := rigs.OpenStream(t, t.TempDir(), localstream.Options{}, "video", localstream.StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		ev := localstream.Event{RoutingKey: drone, Writer: "video/" + drone, EventTime: int64(1000 + i*100), ContentType: "video/h264",
			Payload: fmt.Appendf(nil, "\x00\x00\x00\x01%s-chunk-%d;", drone, i)}
		if i%5 == 0 {
			ev.Flags |= localstream.FlagKeyframe
		}
		if _, err := st.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	nc := connectSecured(t, sc)
	sink, err := replicate.NewJetStreamSink(nc, agent, "0123456789abcdef", replicate.JetStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	r := replicate.NewReplicator(st, sink, "0123456789abcdef", replicate.ReplicatorConfig{
		Watermark: func(c localstream.StreamCut) (watermark.Watermark, error) {
			return watermark.Watermark{LowerNs: int64(1000 + n*100), UpperNs: int64(1000 + n*100), Cut: c}, nil
		}})
	rctx, rcancel := context.WithCancel(ctx)
	rdone := make(chan error, 1)
	go func() { rdone <- r.Run(rctx) }()
	testkit.WaitFor(t, 20*time.Second, "replicated", func() bool { s := r.Stats(); return s.BacklogEvents == 0 && s.Txns > 0 })
	rcancel()
	if err := <-rdone; err != nil && rctx.Err() == nil {
		t.Fatal(err)
	}
}
