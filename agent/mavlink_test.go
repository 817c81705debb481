package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestMAVLinkDronesShown: simulated MAVLink drones sending to the agent's
// TCP server appear in /status (counters and their autopilot's state),
// in /metrics, in the drone registry, and — with chromium — on the status
// page, with armed, mode, battery and position.
func TestMAVLinkDronesShown(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), "")
	cfg.Telemetry.Enabled, cfg.Video.Enabled = false, false
	cfg.Central.URL = ""
	cfg.MAVLink.Enabled = true
	cfg.MAVLink.UDPListen, cfg.MAVLink.TCPListen = "", "127.0.0.1:0"
	cfg.MAVLink.Drones = map[uint8]string{1: "copter-1"}
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()
	ctx := context.Background()
	res, err := mavlink.Simulate(ctx, mavlink.SimConfig{To: "tcp://" + a.MAVLinkTCPAddr().String(), Drones: 2, Duration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var s Status
	if !testkit.UntilEvery(10*time.Second, 50*time.Millisecond, func() bool {
		getJSON(t, base+"/status", &s)
		return s.MAVLink != nil && s.MAVLink.Stored == uint64(res.Frames)
	}) {
		t.Fatalf("mavlink stored %+v of %d frames", s.MAVLink, res.Frames)
	}
	want := map[string]bool{"copter-1": true, mavlink.DiscoveredID(2): true}
	for _, d := range s.MAVLink.Drones {
		v := d.Vehicle
		if !want[d.ID] || !v.Armed || v.Mode != "LOITER" || v.BatteryPct < 0 || v.PositionNs == 0 || v.Lat < 47 || v.Lat > 48 {
			t.Fatalf("drone %+v", d)
		}
		delete(want, d.ID)
	}
	if len(want) != 0 {
		t.Fatalf("drones missing from /status mavlink: %v", want)
	}
	reg := s.Devices.(map[string]any)["drones"].([]any)
	seen := map[string]bool{}
	for _, d := range reg {
		seen[d.(map[string]any)["id"].(string)] = true
	}
	if !seen["copter-1"] || !seen[mavlink.DiscoveredID(2)] {
		t.Fatalf("registry drones %v", seen)
	}
	m := getText(t, base+"/metrics")
	if !strings.Contains(m, `edge_mavlink_drones_vehicle_armed{drone="copter-1"} 1`) || !strings.Contains(m, "edge_mavlink_stored_total") {
		t.Fatal("/metrics lacks the MAVLink counters")
	}

	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/?interval=250")); err != nil {
		t.Fatal(err)
	}
	const sel = `document.querySelector('#drones tr[data-drone="copter-1"] td[data-k="vehicle"]')`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](sel+` != null`)); err != nil {
		t.Fatal(err)
	}
	cellText, err := chromedp.Run(bctx, chromedp.Evaluate[string](sel+`.textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cellText, "ARMED LOITER") || !strings.Contains(cellText, "battery") || !strings.Contains(cellText, "47.") {
		t.Fatalf("the page shows copter-1's vehicle as %q", cellText)
	}
	t.Logf("page: copter-1 %s", cellText)
}
