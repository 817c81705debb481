package demo

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDemoEndToEnd runs the demo short (3 MQTT drones, 2 with video, a
// MAVLink drone): its verification must pass, the MAVLink drone's frames
// at the centre byte for byte those sent, once, in order.
func TestDemoEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := Run(ctx, Options{Drones: 3, VideoDrones: 2, Rate: 20, Duration: 3 * time.Second, Progress: &out})
	t.Log("\n" + out.String())
	if err != nil {
		if rep != nil {
			t.Fatalf("%v: %v", err, rep.Problems)
		}
		t.Fatal(err)
	}
	if !rep.OK() || !strings.Contains(out.String(), "RESULT: OK") {
		t.Fatalf("verification failed: %v", rep.Problems)
	}
	byName := map[string]StreamReport{}
	for _, s := range rep.Streams {
		byName[s.Name] = s
	}
	if tm := byName["telemetry"]; tm.Central == 0 || tm.Central != tm.Local || tm.Drones != 3+1 || tm.FinalWatermark.IsZero() { // and mav-1
		t.Fatalf("telemetry: %+v", tm)
	}
	if v := byName["video"]; v.Central == 0 || v.Drones != 2 {
		t.Fatalf("video: %+v", v)
	}
	if rep.TelemetryPublished < 3*20 || rep.TelemetryMissing != 0 || rep.TelemetryDuplicated != 0 {
		t.Fatalf("telemetry published %d missing %d duplicated %d", rep.TelemetryPublished, rep.TelemetryMissing, rep.TelemetryDuplicated)
	}
	if rep.MAVLinkSent < 3*50 || rep.MAVLinkCentral != rep.MAVLinkSent || rep.MAVLinkMissing+rep.MAVLinkDuplicated+rep.MAVLinkOutOfOrder != 0 {
		t.Fatalf("mavlink: sent %d, at the centre %d, missing %d, duplicated %d, out of order %d", rep.MAVLinkSent,
			rep.MAVLinkCentral, rep.MAVLinkMissing, rep.MAVLinkDuplicated, rep.MAVLinkOutOfOrder)
	}
	if !strings.Contains(out.String(), "mavlink: simulator sent") {
		t.Fatal("the report does not show the MAVLink drone")
	}
	if _, err := exec.LookPath("ffprobe"); err == nil && rep.ClipFrames <= 0 {
		t.Fatalf("clip: %d frames decoded", rep.ClipFrames)
	}
}
