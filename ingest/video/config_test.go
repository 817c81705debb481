package video

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestConfigYAML loads the README's example and checks defaults and
// validation messages.
func TestConfigYAML(t *testing.T) {
	src := `
listen: 0.0.0.0:5004
payload_types: {96: h264, 97: h265}
allow: [10.0.0.0/24, 127.0.0.1]
drones:
  - id: drone-1
    addr: 10.0.0.11
    codec: h265
    payload_type: 96
    fmtp: "sprop-vps=QAEMAf//AWAAAAMAkAAAAwAAAwA/ugJA; sprop-sps=QgEBAWAAAAMAkAAAAwAAAwA/oAUCAWllupJMrwFoCAAAAwAIAAADAPBA; sprop-pps=RAHBcrRiQA=="
  - id: drone-2
    ssrc: 0x1234abcd
chunk_max_duration: 1500ms
reorder_max_wait: 80ms
`
	var c Config
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Drones[1].SSRC != 0x1234abcd || c.ChunkMaxDuration != 1500*time.Millisecond || c.PayloadTypes[97] != CodecH265 ||
		len(c.Drones[0].params) != 3 || c.ChunkMaxBytes != 900<<10 || !*c.Discover {
		t.Fatalf("%+v", c)
	}
	for field, mut := range map[string]func(*Config){
		"listen":          func(c *Config) { c.Listen = "nope" },
		"chunk_max_bytes": func(c *Config) { c.ChunkMaxBytes = 8 << 20 },
		"drones[0].id":    func(c *Config) { c.Drones[0].ID = "bad id" },
		"drones[1]":       func(c *Config) { c.Drones[1].SSRC = 0 },
		"drones[0].fmtp":  func(c *Config) { c.Drones[0].Fmtp = "sprop-sps=!!" },
		"allow":           func(c *Config) { c.Allow = []string{"10.0.0.0/99"} },
		"payload_types":   func(c *Config) { c.PayloadTypes = map[uint8]Codec{96: "vp8"} },
	} {
		bad := c
		bad.Drones = append([]DroneConfig(nil), c.Drones...)
		mut(&bad)
		err := bad.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestParseSDP reads the SDP files ffmpeg wrote for the captures.
func TestParseSDP(t *testing.T) {
	for name, want := range map[string]Codec{"h264": CodecH264, "h265": CodecH265} {
		c := loadCapture(t, name, want)
		ps, err := spropParameterSets(c.fmtp)
		if err != nil || (want == CodecH264 && len(ps) != 2) || (want == CodecH265 && len(ps) != 3) {
			t.Fatalf("%s: %d parameter sets, %v", name, len(ps), err)
		}
		if k := want.classify(ps[len(ps)-1]); k != nalPPS {
			t.Fatalf("%s: last sprop is kind %d", name, k)
		}
	}
	if _, err := ParseSDP("v=0\n"); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
}

// TestSourceConfigRefused: each bad source is refused naming the field,
// never showing the password.
func TestSourceConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		src  SourceConfig
		want string
	}{
		{SourceConfig{URL: "http://cam/x", Drone: "d"}, "sources[0].url"},
		{SourceConfig{URL: "rtsp://u:Pa ss\"w@cam/x", Drone: "d"}, "rtsp://xxxxx@cam/x"},
		{SourceConfig{URL: "rtsp://cam/x", Drone: "bad id"}, "sources[0].drone"},
		{SourceConfig{URL: "rtsp://cam/x", Drone: "ssrc-0000abcd"}, "discovered drone"},
		{SourceConfig{URL: "rtsp://cam/x", Drone: "d1"}, "already a drone"},
		{SourceConfig{URL: "rtsp://cam/x", Drone: "d", Transport: "quic"}, "sources[0].transport"},
		{SourceConfig{URL: "rtsp://cam/x", Drone: "d", CAFile: "/etc/hostname"}, "a CA is for rtsps://"},
		{SourceConfig{URL: "rtsps://cam/x", Drone: "d", CAFile: "/nonexistent.pem"}, "sources[0].ca_file"},
	} {
		cfg := NewDefaultConfig()
		cfg.Drones = []DroneConfig{{ID: "d1", SSRC: 1}}
		cfg.Sources = []SourceConfig{tc.src}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "Pa ss") {
			t.Errorf("%+v: %v, want %q", tc.src, err, tc.want)
		}
	}
}
