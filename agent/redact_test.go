package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/replicate"
)

func TestRedactURLs(t *testing.T) {
	cases := []struct{ in, want string }{
		{"tcp://user:pw@host:1883", "tcp://user:xxxxx@host:1883"},
		{"nats://a:b@c1:4222,nats://a:b@c2:4222", "nats://a:xxxxx@c1:4222,nats://a:xxxxx@c2:4222"},
		{"nats://s3cr3ttoken@c1:4222", "nats://xxxxx@c1:4222"},
		{"tcp://justuser@host", "tcp://justuser@host"},
		{`err="dial tcp://u:p@ss@h:1/x"`, `err="dial tcp://u:xxxxx@h:1/x"`},
		{"no url here, a@b", "no url here, a@b"},
		{`{"central":"nats://u:pw@h:4222"}`, `{"central":"nats://u:xxxxx@h:4222"}`},
	}
	for _, c := range cases {
		if got := RedactURLs(c.in); got != c.want {
			t.Errorf("RedactURLs(%q) = %q want %q", c.in, got, c.want)
		}
	}
}

// TestNoSecretShown gives the agent credentials in every supported way —
// in the MQTT and NATS URLs (password and token), in password files and in
// an environment variable, plus an unreachable central whose URL carries a
// password — and checks that no secret appears in its logs (text and JSON,
// debug level), its errors, /status, /metrics, /healthz or the status page,
// while the URLs themselves are shown (redacted), so the check has
// something to catch.
func TestNoSecretShown(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	cen, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := cen.Start(); err != nil {
		t.Fatal(err)
	}
	defer cen.Close()
	natsHost := strings.TrimPrefix(cen.ClientURL(), "nats://")
	mqttHost := strings.TrimPrefix(brk.URL(), "tcp://")
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	deadHost := closed.Addr().String()
	closed.Close()

	writeSecret := func(s string) string {
		p := filepath.Join(t.TempDir(), "pw")
		if err := os.WriteFile(p, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name   string
		secret string
		set    func(c *Config, secret string)
	}{
		{"mqtt url", "mqtt-url-S3cret", func(c *Config, s string) {
			c.Telemetry.Broker = "tcp://edge:" + s + "@" + mqttHost
		}},
		{"mqtt password file", "mqtt-file-S3cret", func(c *Config, s string) {
			c.Telemetry.Username, c.Telemetry.PasswordFile = "edge", writeSecret(s)
		}},
		{"mqtt password env", "mqtt-env-S3cret", func(c *Config, s string) {
			t.Setenv("EDGE_TEST_MQTT_PASSWORD", s)
			c.Telemetry.Username, c.Telemetry.PasswordEnv = "edge", "EDGE_TEST_MQTT_PASSWORD"
		}},
		{"nats url password", "nats-url-S3cret", func(c *Config, s string) {
			c.Central.URL = "nats://edge:" + s + "@" + natsHost
		}},
		{"nats url token", "nats-token-S3cret", func(c *Config, s string) {
			c.Central.URL = "nats://" + s + "@" + natsHost
		}},
		{"nats password file", "nats-file-S3cret", func(c *Config, s string) {
			c.Central.URL, c.Central.User, c.Central.PasswordFile = "nats://"+natsHost, "edge", writeSecret(s)
		}},
		// The test central has no nkey users: refused, but the seed was used.
		{"nats nkey seed file (refused)", nkeySeed(t), func(c *Config, s string) {
			c.Central.URL, c.Central.NkeySeedFile = "nats://"+natsHost, writeSecret(s)
		}},
		{"mavlink signing key file (passphrase)", "mavlink-key-S3cret", func(c *Config, s string) {
			c.MAVLink.Enabled, c.MAVLink.UDPListen, c.MAVLink.TCPListen = true, "", "127.0.0.1:0"
			c.MAVLink.Signing = mavlink.SigningConfig{KeyFile: writeSecret(s), Require: true}
		}},
		{"mavlink signing key env (hex)", "0011223344556677889900aabbccddeeff0011223344556677889900aabbccdd", func(c *Config, s string) {
			t.Setenv("EDGE_TEST_MAVLINK_KEY", s)
			c.MAVLink.Enabled, c.MAVLink.UDPListen, c.MAVLink.TCPListen = true, "", "127.0.0.1:0"
			c.MAVLink.Signing = mavlink.SigningConfig{KeyEnv: "EDGE_TEST_MAVLINK_KEY"}
		}},
		{"unreachable nats url", "nats-dead-S3cret", func(c *Config, s string) {
			c.Central.URL = "nats://edge:" + s + "@" + deadHost
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir(), brk.URL())
			cfg.Central.ShutdownTimeout = 500 * time.Millisecond
			c.set(&cfg, c.secret)
			var text, js testkit.SyncBuffer
			logger := slog.New(slog.NewMultiHandler(
				NewLogger(LogConfig{Level: "debug", Format: "text"}, &text).Handler(),
				NewLogger(LogConfig{Level: "debug", Format: "json"}, &js).Handler()))
			a, err := New(cfg, logger)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- a.Run(runCtx) }()
			select {
			case <-a.Ready():
			case err := <-done:
				t.Fatalf("agent did not start: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("agent not ready")
			}
			base := "http://" + a.HTTPAddr()
			var shown []string
			var s Status
			deadline := time.Now().Add(10 * time.Second)
			testkit.UntilEvery(time.Until(deadline), 50*time.Millisecond, func() bool { // asserted below
				getJSON(t, base+"/status", &s)
				return strings.HasPrefix(c.name, "unreachable") || strings.HasSuffix(c.name, "(refused)") || s.CentralConnected
			})
			if strings.HasPrefix(c.name, "unreachable") {
				// Shown with its URL, and the replicators say why they fail.
				testkit.UntilEvery(time.Until(deadline), 100*time.Millisecond, func() bool { // asserted below
					getJSON(t, base+"/status", &s)
					return strings.Contains(s.Errors["sync/telemetry"], replicate.ErrNotConnected.Error())
				})
				if s.CentralConnected || !strings.Contains(s.Errors["central"], "not connected to nats://") ||
					!strings.Contains(s.Errors["central"], deadHost) ||
					!strings.Contains(s.Errors["sync/telemetry"], replicate.ErrNotConnected.Error()) {
					t.Errorf("unreachable central not shown in /status: connected=%v errors=%v", s.CentralConnected, s.Errors)
				}
				if !strings.Contains(text.String(), "central unreachable") || !strings.Contains(text.String(), deadHost) {
					t.Errorf("unreachable central not logged with its URL:\n%s", text.String())
				}
			} else if !s.CentralConnected && !strings.HasSuffix(c.name, "(refused)") {
				t.Fatalf("central not connected: %v", s.Errors)
			}
			for _, p := range []string{"/status", "/metrics", "/healthz", "/", "/app.js"} {
				shown = append(shown, getText(t, base+p))
			}
			cancel()
			if err := <-done; err != nil {
				shown = append(shown, err.Error())
			}
			shown = append(shown, text.String(), js.String())
			all := strings.Join(shown, "\n")
			for _, form := range []string{c.secret, url.QueryEscape(c.secret)} {
				if strings.Contains(all, form) {
					i := strings.Index(all, form)
					t.Errorf("secret %q shown: …%s…", form, all[max(0, i-200):min(len(all), i+100)])
				}
			}
			// What is shown instead: the redacted URL, in the logs.
			if strings.Contains(c.name, "url") && !strings.Contains(text.String(), "xxxxx@") {
				t.Errorf("no redacted URL in the text log:\n%s", text.String())
			}
			if strings.Contains(c.name, "url") && !strings.Contains(js.String(), "xxxxx@") {
				t.Errorf("no redacted URL in the JSON log")
			}
		})
	}
}

// nkeySeed is a fresh user nkey seed.
func nkeySeed(t *testing.T) string {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return string(seed)
}

// A config error that quotes a URL does not quote its password.
func TestConfigErrorRedacted(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Central.URL = "http://edge:cfg-S3cret@central:4222"
	_, err := New(cfg, nil)
	if !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "cfg-S3cret") || !strings.Contains(err.Error(), "central.url") {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkRedactStatus: the cost of redacting a /status-sized document
// (16 KiB of JSON with URLs) with the secrets of a configuration that sets
// them all.
func BenchmarkRedactStatus(b *testing.B) {
	dir := b.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("nats-file-S3cret\n"), 0o600)
	b.Setenv("EDGE_BENCH_MQTT_PASSWORD", "mqtt-env-S3cret")
	cfg := NewDefaultConfig()
	cfg.Telemetry.Broker = "tcp://edge:mqtt-url-S3cret@broker:1883"
	cfg.Telemetry.PasswordEnv = "EDGE_BENCH_MQTT_PASSWORD"
	cfg.Central.URL = "nats://edge:nats-url-S3cret@c1:4222"
	cfg.Central.PasswordFile = pw
	r := newRedactor(cfg)
	chunk := `{"name":"telemetry","replication":{"state":"replicating","last_error":"dial nats://c1:4222: refused"},"stats":{"appended":123456}},` + "\n"
	doc := strings.Repeat(chunk, 16<<10/len(chunk))
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		r.String(doc)
	}
}

// TestRedactorTrickyPasswords: a password holding any of ',' '/' ' ' '"'
// '<' '\' '@' ':' given in a URL as written is found as written, decoded,
// and in the forms text gives it on the way out (Go- and JSON-quoted,
// percent-encoded, quoted twice), and in the pieces a list or a URL parser
// cuts it into; a URL the redactor was not given still loses its userinfo.
func TestRedactorTrickyPasswords(t *testing.T) {
	for _, c := range []string{",", "/", " ", `"`, "<", `\`, "@", ":"} {
		pw := "Left9" + c + "Right9"
		r := NewRedactor()
		r.AddURLs("nats://other:pw2@h1:4222,tcp://edge:" + pw + "@host:1883")
		q := strconv.Quote("tcp://edge:" + pw + "@host:1883")
		for _, text := range []string{
			"connected to tcp://edge:" + pw + "@host:1883",
			`parse ` + q + `: invalid`,
			jsonEscaped(`err="parse ` + q + `"`),
			"tcp://edge:" + url.QueryEscape(pw) + "@host",
			"tcp://edge:" + url.UserPassword("edge", pw).String()[5:] + "@host",
		} {
			if got := r.String(text); strings.Contains(got, "Left9") || strings.Contains(got, "Right9") {
				t.Errorf("password with %q: %q -> %q", c, text, got)
			}
		}
	}
	if got := NewRedactor().String("dial nats://u:secretpw@h:1"); got != "dial nats://u:xxxxx@h:1" {
		t.Errorf("unknown URL: %q", got)
	}
}

// TestRedactorShortSecrets: a password shorter than minSecretLen is never
// shown where it stands as a URL's password (as written, escaped, quoted,
// in JSON), whatever its length — one letter included — and text that
// merely holds its letters is left intact: the status key of a drone
// named after the word, a log line full of the letter. A long password
// is still replaced wherever it appears.
func TestRedactorShortSecrets(t *testing.T) {
	for _, pw := range []string{"a", "wrong", "w@r:g", "ab,c"} {
		r := NewRedactor()
		r.AddURLs("rtsp://cam:" + pw + "@10.0.0.11:554/stream")
		r.AddSecret(pw) // as a password file would hold it
		u := "rtsp://cam:" + pw + "@10.0.0.11:554/stream"
		for _, text := range []string{
			u + " failing since 2026-12-02T05:57:43Z",
			"parse " + strconv.Quote(u) + ": invalid",
			jsonEscaped(`err="parse ` + strconv.Quote(u) + `"`),
			"rtsp://cam:" + url.QueryEscape(pw) + "@10.0.0.11",
			"rtsp://cam:" + url.UserPassword("cam", pw).String()[4:] + "@10.0.0.11",
		} {
			got := r.String(text)
			if !strings.Contains(got, "cam:xxxxx@") {
				t.Errorf("password %q: %q -> %q", pw, text, got)
			}
		}
		for _, text := range []string{
			"video/source/wrong-pw",
			"a drone streams again: all packets arrived, a wrong guess, w@r:g ab,c",
			`{"errors":{"video/source/wrong-pw":"rtsp://cam:xxxxx@10.0.0.11:554/stream failing"}}`,
		} {
			if got := r.String(text); got != text {
				t.Errorf("password %q mangled ordinary text: %q -> %q", pw, text, got)
			}
		}
	}
	r := NewRedactor()
	r.AddURLs("rtsp://cam:longenough@10.0.0.11/stream")
	if got := r.String("the word longenough, quoted \"longenough\""); strings.Contains(got, "longenough") {
		t.Errorf("a long password is not replaced everywhere: %q", got)
	}
}
