package rigs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// SecuredCentral is a JetStream server that admits only clients that
// verify it with CAFile, show a client certificate signed by that CA
// (CertFile, KeyFile) and log in with CredsFile: an operator-mode user
// (JWT + nkey seed) of an account with JetStream, as a production
// centre runs (docs/security.md).
type SecuredCentral struct {
	// URL is the client URL (nats://127.0.0.1:PORT; the server requires
	// TLS, which a client with a CA upgrades to).
	URL string
	// CAFile, CertFile, KeyFile and CredsFile are PEM and creds files in
	// a temporary directory.
	CAFile, CertFile, KeyFile, CredsFile string
	// Server is the running server.
	Server *server.Server
}

// StartSecuredCentral starts a SecuredCentral on a free loopback port,
// stopped when the test ends.
func StartSecuredCentral(t testing.TB) *SecuredCentral {
	t.Helper()
	dir := t.TempDir()
	sc := &SecuredCentral{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"),
		KeyFile: filepath.Join(dir, "client-key.pem"), CredsFile: filepath.Join(dir, "user.creds")}
	srvCert, srvKey := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	writeCerts(t, sc.CAFile, srvCert, srvKey, sc.CertFile, sc.KeyFile)

	fail := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	fail(err)
	opub, _ := okp.PublicKey()
	sysKP, err := nkeys.CreateAccount()
	fail(err)
	sysPub, _ := sysKP.PublicKey()
	sysJWT, err := jwt.NewAccountClaims(sysPub).Encode(okp)
	fail(err)
	akp, err := nkeys.CreateAccount()
	fail(err)
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(okp)
	fail(err)
	ukp, err := nkeys.CreateUser()
	fail(err)
	upub, _ := ukp.PublicKey()
	userJWT, err := jwt.NewUserClaims(upub).Encode(akp)
	fail(err)
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	fail(err)
	fail(os.WriteFile(sc.CredsFile, creds, 0o600))

	oc := jwt.NewOperatorClaims(opub)
	oc.SystemAccount = sysPub
	res := &server.MemAccResolver{}
	fail(res.Store(sysPub, sysJWT))
	fail(res.Store(apub, accJWT))
	tlsc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: sc.CAFile, Verify: true})
	fail(err)
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{oc}, SystemAccount: sysPub, AccountResolver: res,
		TLS: true, TLSVerify: true, TLSConfig: tlsc, TLSTimeout: 5}
	s, err := server.NewServer(opts)
	fail(err)
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("rigs: secured central not ready")
	}
	sc.Server = s
	sc.URL = "nats://" + s.Addr().String()
	return sc
}

// writeCerts writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, each signed by the CA, as PEM files.
func writeCerts(t testing.TB, caFile, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rigs test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, caFile, "CERTIFICATE", caDER)
	for i, leaf := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
	}{{srvCert, srvKey, x509.ExtKeyUsageServerAuth}, {cliCert, cliKey, x509.ExtKeyUsageClientAuth}} {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		c := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{leaf.usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, c, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, leaf.cert, "CERTIFICATE", der)
		writePEM(t, leaf.key, "EC PRIVATE KEY", kd)
	}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
