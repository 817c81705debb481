package telemetry

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// password returns the configured password, from PasswordFile or
// PasswordEnv. Errors name the file or variable, never the value.
func (c Config) password() (string, error) {
	switch {
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("%w: password file: %w", ErrCredentials, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("%w: password env %s is not set", ErrCredentials, c.PasswordEnv)
		}
		return v, nil
	}
	return "", nil
}

// tlsConfig builds the TLS configuration, or nil when none is configured
// and the scheme is plain.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.CAFile == "" && c.CertFile == "" && c.ServerName == "" && !tlsScheme(c.Broker) {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: ca file: %w", ErrCredentials, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: ca file %s: no PEM certificates", ErrCredentials, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client cert %s / key %s: %w", ErrCredentials, c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func tlsScheme(broker string) bool {
	for _, p := range []string{"ssl://", "tls://", "mqtts://", "wss://"} {
		if strings.HasPrefix(broker, p) {
			return true
		}
	}
	return false
}

// LogValue keeps secrets out of logs: a Config logged through slog shows
// where credentials come from, never their values.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("broker", c.Broker), slog.String("client_id", c.ClientID),
		slog.Any("topics", c.Topics), slog.String("status_topic", c.StatusTopic),
		slog.Bool("username_set", c.Username != ""),
		slog.String("password_file", c.PasswordFile), slog.String("password_env", c.PasswordEnv),
		slog.String("ca_file", c.CAFile), slog.String("cert_file", c.CertFile))
}
