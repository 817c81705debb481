package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// trickyPasswords are passwords, one for each character that broke the
// redaction (RFC 3986 allows ',' ':' '@' in userinfo as written; '/' ' '
// '"' '<' '\' only percent-encoded, but operators write them as they
// are). Each is two markers joined by its character: a leak shows either
// marker, whole or half.
var trickyPasswords = func() map[string]string {
	m := map[string]string{}
	for name, c := range map[string]string{"comma": ",", "slash": "/", "space": " ", "quote": `"`, "lt": "<", "backslash": `\`, "at": "@", "colon": ":"} {
		m[name] = "Zq" + name + "L9" + c + "Zq" + name + "R9"
	}
	return m
}()

// markers are the halves a leak of any password would show.
func markers() []string {
	var out []string
	for name := range trickyPasswords {
		out = append(out, "Zq"+name+"L9", "Zq"+name+"R9")
	}
	return out
}

// parseable: a URL written with p as it is can be used (url.Parse takes it).
func parseable(p string) bool {
	_, err := url.Parse("tcp://u:" + p + "@127.0.0.1:1")
	return err == nil && !strings.ContainsAny(p, ",") // ',' separates central URLs
}

// encoded is p percent-encoded for a URL's userinfo.
func encoded(p string) string { return url.UserPassword("u", p).String()[2:] }

// checkShown fails the test for every marker of a password in out.
func checkShown(t *testing.T, where, out string) {
	t.Helper()
	for _, m := range markers() {
		if i := strings.Index(out, m); i >= 0 {
			t.Errorf("%s shows a password (%s): …%s…", where, m, out[max(0, i-160):min(len(out), i+80)])
		}
	}
}

// runCmd runs the test binary as `edge-agent args...` with a timeout and
// returns its exit code and its stdout and stderr together.
func runCmd(t *testing.T, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := agentCommand(ctx, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode(), out.String()
}

// TestNoPasswordShownAnywhere gives passwords holding ',' '/' ' ' '"' '<'
// '\' '@' ':' — as written and percent-encoded — in every place a
// command takes a URL (RTSP sources' rtsp:// URLs included), and greps every output for them: `run` (logs in
// text and JSON, /status, /metrics, /healthz, /status/history, the page,
// /debug/pprof/ and its cmdline), its configuration errors (flags and
// file), and the stdout and stderr of simulate, replay, read, export and
// cut against a reachable broker and an unreachable centre. Each output
// must also show the redacted URL, so the check has something to catch.
func TestNoPasswordShownAnywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a dozen subprocesses")
	}
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	cen := rigs.StartCentral(t, central.Config{DataDir: t.TempDir()})
	mqttHost := strings.TrimPrefix(brk.URL(), "tcp://")
	natsHost := strings.TrimPrefix(cen.ClientURL(), "nats://")
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadHost := dead.Addr().String()
	dead.Close()

	// Every password in the central list (percent-encoded when it must be,
	// as written when it may), the comma one in the broker URL as written.
	var centrals []string
	for _, p := range trickyPasswords {
		switch {
		case strings.Contains(p, ","):
		case parseable(p):
			centrals = append(centrals, "nats://u:"+p+"@"+natsHost)
		default:
			centrals = append(centrals, "nats://u:"+encoded(p)+"@"+natsHost)
		}
	}
	broker := "tcp://edge:" + trickyPasswords["comma"] + "@" + mqttHost
	// An RTSP source for every password (a camera that refuses the
	// connection: the source fails and says so in the logs, /status and
	// the page).
	var rtspFlags []string
	for name, p := range trickyPasswords {
		if !parseable(p) {
			p = encoded(p)
		}
		rtspFlags = append(rtspFlags, "--rtsp-source", "cam-"+name+"=rtsp://cam:"+p+"@"+deadHost+"/stream")
	}

	t.Run("run", func(t *testing.T) {
		for _, format := range []string{"text", "json"} {
			t.Run(format, func(t *testing.T) {
				dir := t.TempDir()
				httpPort := freePort(t)
				cfgPath := filepath.Join(dir, "agent.yaml")
				os.WriteFile(cfgPath, []byte(fmt.Sprintf("agent_id: secrets\ndata_dir: %s\nstore: {min_free_bytes: 16777216}\nvideo: {listen: \"127.0.0.1:0\", rtcp_listen: mux}\n", filepath.Join(dir, "agent"))), 0o644)
				cmd := agentCommand(context.Background(), append([]string{"run", "--config", cfgPath, "--log-format", format, "--pprof",
					"--http-listen", fmt.Sprintf("127.0.0.1:%d", httpPort), "--mqtt-broker", broker, "--central", strings.Join(centrals, ",")},
					rtspFlags...)...)
				var logs testkit.SyncBuffer
				cmd.Stdout, cmd.Stderr = &logs, &logs
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				waitHealthy(t, cmd, httpPort)
				base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
				// Connected and every source failed once (the logs are searched
				// below, whatever was reached).
				testkit.UntilEvery(20*time.Second, 50*time.Millisecond, func() bool {
					return strings.Contains(logs.String(), "connected") && strings.Count(logs.String(), "RTSP source failing") >= len(trickyPasswords)
				})
				var shown []string
				for _, p := range []string{"/status", "/metrics", "/healthz", "/status/history", "/", "/app.js", "/debug/pprof/", "/debug/pprof/cmdline"} {
					resp, err := http.Get(base + p)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Errorf("%s: %d %s", p, resp.StatusCode, b)
					}
					checkShown(t, p, string(b))
					shown = append(shown, string(b))
				}
				if all := strings.Join(shown, "\n"); !strings.Contains(all, "xxxxx@") || !strings.Contains(all, "rtsp://cam:xxxxx@") {
					t.Errorf("no redacted URL (or no redacted RTSP source) in the responses")
				}
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()
				checkShown(t, format+" logs", logs.String())
				if !strings.Contains(logs.String(), "edge:xxxxx@") || !strings.Contains(logs.String(), "u:xxxxx@") || !strings.Contains(logs.String(), "rtsp://cam:xxxxx@") {
					t.Errorf("the %s logs show no redacted URL:\n%s", format, logs.String())
				}
			})
		}
	})

	// The same URLs refused at start: every password as written, in a flag
	// and in the file; the error names the key without the password.
	t.Run("config errors", func(t *testing.T) {
		for name, p := range trickyPasswords {
			raw := "tcp://edge:" + p + "@" + mqttHost
			dir := t.TempDir()
			cfgPath := filepath.Join(dir, "agent.yaml")
			rtsp := "rtsp://cam:" + p + "@" + mqttHost + "/stream"
			os.WriteFile(cfgPath, []byte(fmt.Sprintf("agent_id: secrets\ndata_dir: %s\ntelemetry: {broker: %q}\ncentral: {url: %q}\nhttp: {listen: \"\"}\nvideo: {sources: [{drone: cam, url: %q}]}\n",
				filepath.Join(dir, "agent"), raw, "http://u:"+p+"@"+natsHost, rtsp)), 0o644)
			code, out := runCmd(t, 20*time.Second, "run", "--config", cfgPath)
			checkShown(t, "run --config ("+name+")", out)
			if code != 2 || !strings.Contains(out, "xxxxx") {
				t.Errorf("run --config with a %s password: exit %d: %s", name, code, out)
			}
			code, out = runCmd(t, 20*time.Second, "run", "--data-dir", dir, "--http-listen", "", "--mqtt-broker", raw, "--central", "http://u:"+p+"@"+natsHost,
				"--rtsp-source", "cam="+rtsp)
			checkShown(t, "run --mqtt-broker ("+name+")", out)
			if code != 2 || !strings.Contains(out, "xxxxx") {
				t.Errorf("run --mqtt-broker with a %s password: exit %d: %s", name, code, out)
			}
		}
	})

	// The other commands, each password as written and encoded.
	pcap, jsonl := filepath.Join("..", "..", "testdata", "h264.pcap"), filepath.Join("..", "..", "testdata", "telemetry.jsonl")
	udp, _ := net.ListenPacket("udp", "127.0.0.1:0")
	defer udp.Close()
	at := time.Now().Format(time.RFC3339)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for name, p := range trickyPasswords {
		for _, form := range []string{p, encoded(p)} {
			mqtt := "tcp://edge:" + form + "@" + mqttHost
			nats := "nats://u:" + form + "@" + deadHost
			for _, args := range [][]string{
				{"simulate", "--mqtt-broker", mqtt, "--drones", "1", "--rate", "20", "--duration", "300ms", "--verbose"},
				{"replay", "--pcap", pcap, "--to", udp.LocalAddr().String(), "--speed", "max", "--jsonl", jsonl, "--mqtt-broker", mqtt},
				{"read", "--central", nats, "--stream", "telemetry"},
				{"export", "video", "--central", nats, "--drone", "d1", "--from", at, "--to", at, "-o", filepath.Join(t.TempDir(), "o.h264")},
				{"cut", "--central", nats, "--at", at},
			} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					code, out := runCmd(t, 60*time.Second, args...)
					where := fmt.Sprintf("%s (%s password, exit %d)", args[0], name, code)
					checkShown(t, where, out)
					if strings.Contains(out, "://") && !strings.Contains(out, "xxxxx") {
						t.Errorf("%s shows a URL but nothing redacted: %s", where, out)
					}
				}()
			}
		}
	}
	wg.Wait()
}
