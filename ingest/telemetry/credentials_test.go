package telemetry

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// writePKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM, into dir.
func writePKI(t *testing.T, dir string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey := newKey()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	write("ca.pem", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(k)
		write(name+".pem", "CERTIFICATE", der)
		write(name+"-key.pem", "EC PRIVATE KEY", kb)
	}
	leaf("server", 2, x509.ExtKeyUsageServerAuth)
	leaf("client", 3, x509.ExtKeyUsageClientAuth)
}

// TestTLSClientCertAndPassword: mosquitto with a TLS listener that requires
// a client certificate, and a password file. The agent connects with its
// CA, client certificate and a password from a file, and ingests; a wrong
// password (from the environment) is refused; the password never reaches
// the logs.
func TestTLSClientCertAndPassword(t *testing.T) {
	passwd, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		t.Skip("mosquitto_passwd not installed")
	}
	dir := t.TempDir()
	writePKI(t, dir)
	const secret = "s3cret-Pa55"
	pwFile := filepath.Join(dir, "passwd")
	if out, err := exec.Command(passwd, "-c", "-b", pwFile, "agent", secret).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v: %s", err, out)
	}
	extra := fmt.Sprintf("cafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate true\npassword_file %s",
		filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), pwFile)
	b, err := broker.Start(context.Background(), broker.Options{Dir: t.TempDir(), NoAnonymous: true, ExtraConfig: extra, NoFallback: true})
	if errors.Is(err, broker.ErrNoBinary) {
		t.Skip("mosquitto not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	secretFile := filepath.Join(dir, "agent.pw")
	os.WriteFile(secretFile, []byte(secret+"\n"), 0o600)

	var logs testkit.SyncBuffer
	cfg := testConfig(fmt.Sprintf("ssl://127.0.0.1:%d", b.Port()), "agent-tls")
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	cfg.Username, cfg.PasswordFile = "agent", secretFile
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Logger.Info("config", "telemetry", cfg)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "TLS connect", func() bool { return in.Stats().Connects > 0 })

	// Publish through the same listener with a client certificate and the password.
	tc, err := cfg.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	pub := paho.NewClient(paho.NewClientOptions().AddBroker(cfg.Broker).SetClientID("tls-pub").
		SetUsername("agent").SetPassword(secret).SetTLSConfig(tc))
	if tok := pub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publisher: %v", tok.Error())
	}
	pub.Publish("drones/d1/telemetry", 1, false, `{"seq":1}`).Wait()
	pub.Disconnect(50)
	testkit.WaitFor(t, 10*time.Second, "appended over TLS", func() bool { return in.Stats().Appended == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A wrong password is refused.
	t.Setenv("EDGE_TEST_MQTT_PW", "wrong")
	bad := cfg
	bad.ClientID, bad.PasswordFile, bad.PasswordEnv = "agent-tls-bad", "", "EDGE_TEST_MQTT_PW"
	in2, stop2 := runIngester(t, bad, s, st, nil)
	time.Sleep(1500 * time.Millisecond) // a window of connect attempts: a refused one is no event to wait on
	stop2()
	if in2.Stats().Connects != 0 {
		t.Fatal("connected with a wrong password")
	}
	// Without a client certificate the handshake fails.
	noCert := tls.Config{RootCAs: tc.RootCAs}
	c := paho.NewClient(paho.NewClientOptions().AddBroker(cfg.Broker).SetClientID("nocert").
		SetUsername("agent").SetPassword(secret).SetTLSConfig(&noCert).SetConnectTimeout(2 * time.Second))
	if tok := c.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
		c.Disconnect(10)
		t.Fatal("connected without a client certificate")
	}
	if l := logs.String(); strings.Contains(l, secret) || !strings.Contains(l, "password_file") {
		t.Fatalf("logs leak the password or miss the config: %s", l)
	}
}

func TestCredentialErrors(t *testing.T) {
	cfg := testConfig("ssl://127.0.0.1:1", "x")
	cfg.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := cfg.tlsConfig(); !errors.Is(err, ErrCredentials) {
		t.Fatal(err)
	}
	garbage := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(garbage, []byte("not pem"), 0o600)
	cfg.CAFile = garbage
	if _, err := cfg.tlsConfig(); !errors.Is(err, ErrCredentials) {
		t.Fatal(err)
	}
	cfg.CAFile, cfg.PasswordEnv = "", "EDGE_TEST_UNSET_PW_VAR"
	if _, err := cfg.password(); !errors.Is(err, ErrCredentials) || strings.Contains(err.Error(), "=") {
		t.Fatal(err)
	}
	cfg.PasswordFile = "x"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatal("file and env both set accepted")
	}
	cfg.PasswordFile, cfg.CertFile = "", "c.pem"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatal("cert without key accepted")
	}
}
