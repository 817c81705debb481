package demo

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDemoEndToEnd runs the demo short: its verification must pass.
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
	if tm := byName["telemetry"]; tm.Central == 0 || tm.Central != tm.Local || tm.Drones != 3 || tm.FinalWatermark.IsZero() {
		t.Fatalf("telemetry: %+v", tm)
	}
	if v := byName["video"]; v.Central == 0 || v.Drones != 2 {
		t.Fatalf("video: %+v", v)
	}
	if rep.TelemetryPublished < 3*20 || rep.TelemetryMissing != 0 || rep.TelemetryDuplicated != 0 {
		t.Fatalf("telemetry published %d missing %d duplicated %d", rep.TelemetryPublished, rep.TelemetryMissing, rep.TelemetryDuplicated)
	}
	if _, err := exec.LookPath("ffprobe"); err == nil && rep.ClipFrames <= 0 {
		t.Fatalf("clip: %d frames decoded", rep.ClipFrames)
	}
}
