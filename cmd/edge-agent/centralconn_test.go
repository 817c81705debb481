package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// TestCentralConnResolves: each way the nats CLI authenticates (user and
// password, a token as --user alone or a context's token, an NKey seed
// file) reaches a server that requires it, from flags, environment or a
// context; a flag beats its environment variable, which beats the
// context, and authentication comes whole from one source; bad settings
// are usage errors that name their source.
func TestCentralConnResolves(t *testing.T) {
	for _, k := range []string{"NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_NKEY", "NATS_CA", "NATS_CERT", "NATS_KEY", "NATS_CONTEXT"} {
		t.Setenv(k, "")
	}
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	writeContext := func(name string, doc map[string]any) {
		b, _ := json.Marshal(doc)
		os.MkdirAll(filepath.Join(cfgHome, "nats", "context"), 0o755)
		if err := os.WriteFile(filepath.Join(cfgHome, "nats", "context", name+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	seed, _ := ukp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	os.WriteFile(seedFile, seed, 0o600)

	start := func(o *server.Options) string {
		o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		return "nats://" + s.Addr().String()
	}
	userURL := start(&server.Options{Users: []*server.User{{Username: "ops", Password: "s3cret"}}})
	tokenURL := start(&server.Options{Authorization: "tok-123"})
	nkeyURL := start(&server.Options{Nkeys: []*server.NkeyUser{{Nkey: upub}}})

	connect := func(args ...string) error {
		fs := newFlagSet("test", io.Discard)
		c := addCentralFlags(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		nc, err := c.connect("test")
		if err == nil {
			nc.Close()
		}
		return err
	}
	ok := func(what string, args ...string) {
		t.Helper()
		if err := connect(args...); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	ok("user/password flags", "--central", userURL, "--user", "ops", "--password", "s3cret")
	ok("token as --user alone", "--central", tokenURL, "--user", "tok-123")
	ok("nkey flag", "--central", nkeyURL, "--nkey", seedFile)
	writeContext("tok", map[string]any{"url": tokenURL, "token": "tok-123"})
	ok("context token", "--context", "tok")
	t.Setenv("NATS_CONTEXT", "tok")
	ok("$NATS_CONTEXT", "--central", tokenURL)
	t.Setenv("NATS_CONTEXT", "")
	writeContext("usr", map[string]any{"url": userURL, "user": "ops", "password": "wrong"})
	t.Setenv("NATS_PASSWORD", "s3cret")
	t.Setenv("NATS_USER", "ops")
	ok("environment auth beats the context's", "--context", "usr")
	t.Setenv("NATS_USER", "")
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("NATS_URL", nkeyURL)
	t.Setenv("NATS_NKEY", seedFile)
	ok("$NATS_URL and $NATS_NKEY")
	ok("a flag beats its environment variable", "--central", tokenURL, "--user", "tok-123")
	t.Setenv("NATS_NKEY", "")
	t.Setenv("NATS_URL", "")
	os.WriteFile(filepath.Join(cfgHome, "nats", "context.txt"), []byte("tok\n"), 0o600)
	ok("the selected context")
	os.Remove(filepath.Join(cfgHome, "nats", "context.txt"))

	if err := connect("--central", userURL, "--user", "ops", "--password", "bad"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("wrong password: %v", err)
	}
	writeContext("remote", map[string]any{"url": tokenURL, "creds": "nsc://op/acc/user"})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--creds", "/nonexistent/user.creds"}, "--creds"},
		{[]string{"--tlscert", seedFile}, "both cert and key"},
		{[]string{"--creds", seedFile, "--nkey", seedFile}, "choose one"},
		{[]string{"--password", "x"}, "password needs a user"},
		{[]string{"--context", "missing"}, `--context "missing"`},
		{[]string{"--context", "../x"}, "not a context name"},
		{[]string{"--context", "remote"}, "only a file path"},
	} {
		err := connect(c.args...)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
}
