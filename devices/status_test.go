package devices

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

func TestStatusJSON(t *testing.T) {
	if b, err := json.Marshal(NewStatus(nil, nil, nil)); err != nil || string(b) != `{"drones":null,"registry":{"drones":0,"online":0,"drones_rejected":0,"drones_evicted":0,"offline_explicit":0,"offline_silence":0}}` {
		t.Fatalf("%s %v", b, err)
	}
	dir := t.TempDir()
	s := rigs.OpenStore(t, dir, localstream.Options{})
	h, _ := s.CreateStream("health", localstream.StreamConfig{})
	r, _ := NewRegistry(RegistryConfig{})
	r.Seen("d1", SourceMQTT("drones/d1/telemetry"), 10, time.Now())
	r.Drop("d1", "oversize")
	sm, _ := NewSampler(HealthConfig{Agent: "gs-1", DataDir: dir}, h, nil)
	if _, err := sm.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, _ := NewPressure(s, PressureConfig{Logger: quietLogger()})
	if _, err := p.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(NewStatus(r, sm, p))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id":"d1"`, `"online":true`, `"drops":{"oversize":1}`, `"id":"mqtt:drones/d1/telemetry"`,
		`"health":{"v":1,"agent":"gs-1"`, `"disk":{"path":"` + dir, `"sampler":{"samples":1`, `"disk":{"state":"ok"`, `"free_bytes":`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status lacks %s:\n%s", want, b)
		}
	}
}
