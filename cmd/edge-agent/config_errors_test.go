package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunConfigErrors: every configuration error of `edge-agent run` exits
// with status 2 at start, on one line that names the YAML key (or flag)
// once and says what to fix; secrets in a quoted URL are redacted. `config
// check` of a file that run refuses refuses it in the same words (it
// called files naming missing credentials or TLS files, an unset
// password variable or a data_dir that is a file "valid").
func TestRunConfigErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	missing := filepath.Join(t.TempDir(), "missing")
	os.Unsetenv("EDGE_TEST_UNSET_PASSWORD")
	cases := []struct {
		name string
		yaml string   // config file body (with data_dir and free ports added)
		args []string // extra flags
		key  string   // the key the message must name once
		want string   // the message after "edge-agent run: config: <key>: "
	}{
		{"topic without drone level", "", []string{"--mqtt-topic", "drones/x/telemetry"}, "telemetry.topics",
			`"drones/x/telemetry": no drone level: mark it with {drone} or a single + (e.g. drones/+/telemetry)`},
		{"topic with two +", "", []string{"--mqtt-topic", "drones/+/+/telemetry"}, "telemetry.topics",
			`"drones/+/+/telemetry": several + levels: mark the drone level with {drone}`},
		{"topic # not last", "telemetry: {topics: ['a/#/{drone}']}", nil, "telemetry.topics",
			`"a/#/{drone}": '#' must be the last level`},
		{"status topic", "telemetry: {status_topic: drones/status}", nil, "telemetry.status_topic",
			`"drones/status": no drone level: mark it with {drone} or a single + (e.g. drones/+/telemetry)`},
		{"time unit", "telemetry: {time_unit: weeks}", nil, "telemetry.time_unit",
			`"weeks": want auto, s, ms, us or ns`},
		{"mqtt password file", "telemetry: {username: u, password_file: " + missing + "}", nil, "telemetry.password_file",
			"open " + missing + ": no such file or directory"},
		{"mqtt password env", "telemetry: {username: u, password_env: EDGE_TEST_UNSET_PASSWORD}", nil, "telemetry.password_env",
			"environment variable EDGE_TEST_UNSET_PASSWORD is not set"},
		{"mqtt ca file", "telemetry: {ca_file: " + missing + "}", nil, "telemetry.ca_file",
			"open " + missing + ": no such file or directory"},
		{"mqtt cert file", "telemetry: {cert_file: " + missing + ", key_file: " + missing + "}", nil, "telemetry.cert_file",
			"open " + missing + ": no such file or directory"},
		{"mqtt broker url", "", []string{"--mqtt-broker", "edge:mq-S3cret@host"}, "telemetry.broker",
			`"edge:mq-S3cret@host": want a URL such as tcp://127.0.0.1:1883 (or set telemetry.listen)`},
		{"mqtt listen", "", []string{"--mqtt-listen", "nowhere"}, "telemetry.listen", `"nowhere": want HOST:PORT (e.g. 0.0.0.0:1883)`},
		{"mqtt listen port taken", "log: {level: error}", []string{"--mqtt-listen", busy.Addr().String()}, "telemetry.listen",
			busy.Addr().String() + ": bind: address already in use (another server there?): choose another HOST:PORT"},
		{"mqtt max connections", "telemetry: {listen: '127.0.0.1:0', max_connections: -1}", nil, "telemetry.max_connections",
			"-1 is negative: use a count such as 256"},
		{"nats password file", "central: {user: u, password_file: " + missing + "}", nil, "central.password_file",
			"open " + missing + ": no such file or directory"},
		{"nats creds file", "central: {creds_file: " + missing + "}", nil, "central.creds_file",
			"open " + missing + ": no such file or directory"},
		{"nats nkey seed file", "central: {nkey_seed_file: " + missing + "}", nil, "central.nkey_seed_file",
			"open " + missing + ": no such file or directory"},
		{"nats ca file", "central: {ca_file: " + missing + "}", nil, "central.ca_file",
			"open " + missing + ": no such file or directory"},
		{"nats key file", "central: {cert_file: " + os.Args[0] + ", key_file: " + missing + "}", nil, "central.key_file",
			"open " + missing + ": no such file or directory"},
		{"nats url", "", []string{"--central", "http://edge:nats-S3cret@c1:4222"}, "central.url",
			`"http://edge:xxxxx@c1:4222": want embedded or nats://host:port[,nats://...]`},
		{"embedded central port taken", "central: {url: embedded, embedded: {listen: '" + busy.Addr().String() + "'}}", nil,
			"central.embedded.listen", busy.Addr().String() + ": bind: address already in use (another server there?): choose another HOST:PORT"},
		{"http listen", "", []string{"--http-listen", "nowhere"}, "http.listen", `"nowhere": want HOST:PORT (e.g. 127.0.0.1:9464)`},
		{"log format", "", []string{"--log-format", "xml"}, "log.format", `"xml": want text or json`},
		{"video listen", "video: {listen: x}", nil, "video",
			"listen: address x: missing port in address (want host:port)"},
		{"video chunk size", "video: {chunk_max_bytes: -5}", nil, "video",
			"chunk_max_bytes: -5 (want 64 KiB to 4 MiB)"},
		{"rtsp source flag", "", []string{"--rtsp-source", "rtsp://cam/x"}, "--rtsp-source",
			"want DRONE=URL (e.g. drone-1=rtsp://10.0.0.11:554/stream)"},
		{"rtsp source url", "", []string{"--rtsp-source", "cam=http://u:Rt5pS3cret@cam/x"}, "video",
			`sources[0].url: "http://xxxxx@cam/x" is not an RTSP URL (want rtsp://host[:port]/path or rtsps://…, with user:password@ before the host when the camera asks for them; percent-encode a password's reserved characters)`},
		{"data_dir a file", "data_dir: " + os.Args[0], nil, "data_dir",
			os.Args[0] + " is a file, not a directory: choose a directory for the store"},
		{"rtsp source ca file", "video: {sources: [{url: 'rtsps://cam/x', drone: d, ca_file: " + missing + "}]}", nil, "video",
			"sources[0].ca_file: open " + missing + ": no such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			body := "data_dir: " + dir + "\nhttp: {listen: '127.0.0.1:0'}\nvideo: {listen: '127.0.0.1:0', rtcp_listen: mux}\n" +
				"telemetry: {broker: 'tcp://127.0.0.1:1'}\ncentral: {embedded: {listen: '127.0.0.1:0'}}\n"
			path := filepath.Join(dir, "agent.yaml")
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "--config", path}
			if c.yaml != "" {
				over := filepath.Join(dir, "over.yaml")
				if err := os.WriteFile(over, []byte(mergeYAML(body, c.yaml)), 0o644); err != nil {
					t.Fatal(err)
				}
				args = []string{"run", "--config", over}
			}
			var stdout, stderr bytes.Buffer
			code := runMain(context.Background(), append(args, c.args...), &stdout, &stderr)
			msg := strings.TrimSpace(stderr.String())
			want := "edge-agent run: config: " + c.key + ": " + c.want
			if code != 2 || msg != want {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and:\n%s", code, msg, want)
			}
			if n := strings.Count(msg, c.key); n != 1 {
				t.Fatalf("key %s named %d times: %s", c.key, n, msg)
			}
			// `config check` of the file refuses it in the same words
			// (a port in use is for run to find: the agent that
			// config check is run beside holds its own).
			if c.args != nil || strings.HasSuffix(c.name, "port taken") {
				return
			}
			stderr.Reset()
			code = runMain(context.Background(), []string{"config", "check", args[2]}, &stdout, &stderr)
			msg = strings.TrimSpace(stderr.String())
			if want := "edge-agent config: config: " + c.key + ": " + c.want; code != 2 || msg != want {
				t.Errorf("config check: exit %d, stderr:\n%s\nwant exit 2 and:\n%s", code, msg, want)
			}
		})
	}
}

// mergeYAML puts the lines of over after base, replacing base's lines for
// the same top-level keys (flow-style maps here, so a line is a key).
func mergeYAML(base, over string) string {
	overKeys := map[string]bool{}
	for l := range strings.SplitSeq(over, "\n") {
		if k, _, ok := strings.Cut(l, ":"); ok {
			overKeys[k] = true
		}
	}
	var out []string
	for l := range strings.SplitSeq(base, "\n") {
		if k, _, ok := strings.Cut(l, ":"); ok && overKeys[k] {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + "\n" + over + "\n"
}
