package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFileErrors: the file's errors name the line, the key path,
// the value and the fix (issue 40: `idle_timeout: 30` said "cannot
// unmarshal !!int `30` into time.Duration", a typo "field telemtry not
// found in type agent.Config", a syntax error the line above the fault,
// a data_dir that is a file its path twice).
func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	os.WriteFile(file, nil, 0o644)
	cases := []struct {
		name, yaml string
		args       []string
		want       string
	}{
		{"duration without unit", "data_dir: /tmp/x\nwatermark:\n  idle_timeout: 30\n", nil,
			"edge-agent run: config: %s: line 3: watermark.idle_timeout: 30 is a number without a unit: write 30s (or 30ms, 30m: a duration)"},
		{"duration in a flow map", "data_dir: /tmp/x\nwatermark: {allowed_lateness: 1s, idle_timeout: 30}\n", nil,
			"edge-agent run: config: %s: line 2: watermark.idle_timeout: 30 is a number without a unit: write 30s (or 30ms, 30m: a duration)"},
		{"top-level typo", "data_dir: /tmp/x\ntelemtry:\n  enabled: true\n", nil,
			"edge-agent run: config: %s: line 2: telemtry: unknown key at the top level; did you mean telemetry?"},
		{"nested typo", "data_dir: /tmp/x\ncentral:\n  url: embedded\n  comit_interval: 1s\n", nil,
			"edge-agent run: config: %s: line 4: central.comit_interval: unknown key under central; did you mean central.commit_interval?"},
		{"inline key typo", "data_dir: /tmp/x\nvideo:\n  lisen: 127.0.0.1:5004\n", nil,
			"edge-agent run: config: %s: line 3: video.lisen: unknown key under video; did you mean video.listen?"},
		{"syntax: key at a wrong indent", "data_dir: /tmp/x\nhttp:\n  listen: 127.0.0.1:9464\n  pprof: true\n hosts: [a]\n", nil,
			"edge-agent run: config: %s: line 5: YAML syntax: did not find expected key"},
		{"syntax: unclosed list", "data_dir: /tmp/x\nhttp:\n  listen: 127.0.0.1:9464\nwatermark:\n  idle_timeout: [30s\nvideo:\n  enabled: true\n", nil,
			"edge-agent run: config: %s: line 5: YAML syntax: did not find expected ',' or ']'"},
		{"wrong type", "data_dir: /tmp/x\nstore:\n  queue_depth: many\n", nil,
			"edge-agent run: config: %s: line 3: store.queue_depth: cannot unmarshal !!str `many` into int"},
		{"data_dir a file", "http: {listen: '127.0.0.1:0'}\n", []string{"--data-dir", file},
			"edge-agent run: config: data_dir: " + file + " is a file, not a directory: choose a directory for the store"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.yaml")
			os.WriteFile(path, []byte(c.yaml), 0o644)
			code, _, errOut := run(t, append([]string{"run", "--config", path}, c.args...)...)
			want := strings.Replace(c.want, "%s", path, 1)
			if code != 2 || strings.TrimSpace(errOut) != want {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and:\n%s", code, errOut, want)
			}
		})
	}
	if code, _, errOut := run(t, "streams", "--data-dir", file); code != 2 || strings.Count(errOut, file) != 1 {
		t.Errorf("streams --data-dir a file: exit %d, %q: want exit 2 and the path once", code, errOut)
	}
}

// TestConfigCheckAndEnv: `config check FILE` validates and prints the
// effective configuration with secrets redacted; EDGE_AGENT_ variables
// override the file and flags override them (flag > environment > file
// > default); their errors name the variable, and a typo the closest one.
func TestConfigCheckAndEnv(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	os.WriteFile(path, []byte("data_dir: "+dir+"\nwatermark: {idle_timeout: 10s, allowed_lateness: 2s}\n"+
		"central: {url: 'nats://edge:Cfg-S3cret@c1:4222'}\n"), 0o644)
	t.Setenv("EDGE_AGENT_WATERMARK_IDLE_TIMEOUT", "45s")
	t.Setenv("EDGE_AGENT_TELEMETRY_TOPICS", "[fleet/+/telemetry]")
	code, out, errOut := run(t, "config", "check", path)
	if code != 0 || errOut != "" {
		t.Fatalf("config check: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"idle_timeout: 45s", "allowed_lateness: 2s", "- fleet/+/telemetry", "url: nats://edge:xxxxx@c1:4222", "# " + path + ": valid"} {
		if !strings.Contains(out, want) {
			t.Errorf("config check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Cfg-S3cret") {
		t.Error("config check printed the password")
	}
	// The flag beats the variable, the variable the file.
	cfg, err := loadAgentConfig(newFlagSet("run", os.Stderr), []string{"--config", path, "--log-format", "json"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_AGENT_LOG_FORMAT", "text")
	cfg2, err := loadAgentConfig(newFlagSet("run", os.Stderr), []string{"--config", path, "--log-format", "json"})
	if err != nil || cfg.Log.Format != "json" || cfg2.Log.Format != "json" || cfg2.Watermark.IdleTimeout.String() != "45s" || cfg2.Watermark.AllowedLateness.String() != "2s" {
		t.Fatalf("precedence: %v %+v %+v %+v", err, cfg.Log, cfg2.Log, cfg2.Watermark)
	}
	for env, want := range map[string]string{
		"EDGE_AGENT_WATERMARK_IDLE_TIMEOUT=30": "edge-agent config: config: environment EDGE_AGENT_WATERMARK_IDLE_TIMEOUT: watermark.idle_timeout: 30 is a number without a unit: write 30s (or 30ms, 30m: a duration)",
		"EDGE_AGENT_TELEMTRY_BROKER=tcp://x:1": "edge-agent config: config: environment EDGE_AGENT_TELEMTRY_BROKER: no such key; did you mean EDGE_AGENT_TELEMETRY_BROKER?",
		"EDGE_AGENT_STORE_QUEUE_DEPTH=many":    "edge-agent config: config: environment EDGE_AGENT_STORE_QUEUE_DEPTH: store.queue_depth: \"many\": cannot unmarshal !!str `many` into int",
	} {
		k, v, _ := strings.Cut(env, "=")
		t.Setenv(k, v)
		code, _, errOut := run(t, "config", "check", path)
		if code != 2 || strings.TrimSpace(errOut) != want {
			t.Errorf("%s: exit %d, stderr:\n%s\nwant exit 2 and:\n%s", env, code, errOut, want)
		}
		os.Unsetenv(k)
	}
}
