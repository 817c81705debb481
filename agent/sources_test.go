package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestRTSPSourcesOnStatusAndPage: an agent pulls three RTSP sources —
// gortsplib's example server fed by ffmpeg, the same server's
// authenticating example with a wrong password, and a server that accepts
// the connection and never answers. /status and the status page (in
// headless Chromium) show the first streaming and the other two failing
// since when and why, without the password; the agent stops well within
// central.shutdown_timeout although two sources are stuck.
func TestRTSPSourcesOnStatusAndPage(t *testing.T) {
	plain := rtsptest.Start(t, rtsptest.Plain, rtsptest.Options{})
	auth := rtsptest.Start(t, rtsptest.Auth, rtsptest.Options{})
	silent := testkit.SilentServer(t)
	const secret = "Zq9SourcePw"
	rtsptest.Publish(t, plain.URL("", "cam"), rtsptest.H264, 100000, 25, 10)
	rtsptest.Publish(t, auth.URL(rtsptest.PublishUser+":"+rtsptest.PublishPass, "cam"), rtsptest.H264, 100000, 25, 10)
	auth.WaitCount("RECORD request", 1, 10*time.Second)

	cfg := testConfig(t, t.TempDir(), "tcp://127.0.0.1:1")
	cfg.Telemetry.Enabled = false
	cfg.Central.ShutdownTimeout = 3 * time.Second
	cfg.Video.SourceReconnectMax = 500 * time.Millisecond
	cfg.Video.SourceTimeout = 2 * time.Second
	cfg.Video.Sources = []video.SourceConfig{
		{URL: plain.URL("", "cam"), Drone: "good"},
		{URL: auth.URL(rtsptest.ReadUser+":"+secret, "cam"), Drone: "wrong-pw"},
		{URL: "rtsp://u:" + secret + "@" + silent + "/cam", Drone: "silent"},
	}
	a, cancel, done := startAgent(t, cfg)
	base := "http://" + a.HTTPAddr()

	var s Status
	if !testkit.UntilEvery(20*time.Second, 100*time.Millisecond, func() bool {
		getJSON(t, base+"/status", &s)
		return s.Video != nil && len(s.Video.Sources) == 3 && s.Video.Sources[0].State == video.SourceStreaming &&
			strings.Contains(s.Errors["video/source/wrong-pw"], "401") && strings.Contains(s.Errors["video/source/silent"], "no answer") &&
			s.Video.PerDrone["good"].FramesOut > 0
	}) {
		t.Fatalf("sources not as expected: %+v, errors %v", s.Video, s.Errors)
	}
	if !strings.Contains(s.Errors["video/source/wrong-pw"], "check the user and password") || !strings.Contains(s.Errors["video/source/wrong-pw"], "failing since") {
		t.Errorf("wrong-pw: %q", s.Errors["video/source/wrong-pw"])
	}
	raw := getText(t, base+"/status")
	if strings.Contains(raw, secret) || !strings.Contains(raw, "u:xxxxx@") {
		t.Errorf("/status shows the password, or no redacted source URL: %s", raw)
	}

	metrics := getText(t, base+"/metrics")
	for _, want := range []string{`edge_video_sources_state{drone="good"} 1`, `edge_video_sources_state{drone="wrong-pw"} 2`,
		`edge_video_sources_rtp_total{drone="good"}`, `edge_video_sources_attempts_total{drone="silent"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}

	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/?interval=250"),
		chromedp.WaitVisible(`#sources tbody tr[data-source="silent"]`)); err != nil {
		t.Fatal(err)
	}
	type row map[string]string
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]row](`Object.fromEntries([...document.querySelectorAll("#sources tbody tr[data-source]")].map(tr =>
	    [tr.getAttribute("data-source"), Object.fromEntries([...tr.querySelectorAll("td[data-k]")].map(td => [td.dataset.k, td.textContent]))]))`))
	if err != nil {
		t.Fatal(err)
	}
	if rows["good"]["state"] != "streaming" || rows["good"]["codec"] != "h264" {
		t.Errorf("good: %v", rows["good"])
	}
	for _, d := range []string{"wrong-pw", "silent"} {
		if !strings.HasPrefix(rows[d]["state"], "failing since ") || rows[d]["last_error"] == "" {
			t.Errorf("%s: %v", d, rows[d])
		}
	}
	if !strings.Contains(rows["wrong-pw"]["last_error"], "401") || !strings.Contains(rows["silent"]["last_error"], "no answer") {
		t.Errorf("errors on the page: %q, %q", rows["wrong-pw"]["last_error"], rows["silent"]["last_error"])
	}
	html, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, secret) || !strings.Contains(html, "video/source/silent") {
		t.Errorf("the page shows the password, or not the sources' errors")
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(artifactDir(t), "status-page-sources.png")
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > cfg.Central.ShutdownTimeout {
		t.Errorf("stopped in %v with two sources stuck, want within shutdown_timeout %v", d, cfg.Central.ShutdownTimeout)
	} else {
		t.Logf("stopped in %v (shutdown_timeout %v); screenshot %s", d.Round(time.Millisecond), cfg.Central.ShutdownTimeout, out)
	}
}
