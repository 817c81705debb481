package agent

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
)

// checkTopics checks the topic patterns and the time unit, naming the key once:
// `config: telemetry.topics: "drones/x": no drone level: ...`.
func (t TelemetryConfig) checkTopics() error {
	check := func(key, pattern string) error {
		_, err := telemetry.ParsePattern(pattern)
		var pe *telemetry.PatternError
		if errors.As(err, &pe) {
			return fmt.Errorf("%w: %s: %q: %s", ErrConfig, key, pe.Pattern, pe.Reason)
		}
		return err
	}
	for _, p := range t.Topics {
		if err := check("telemetry.topics", p); err != nil {
			return err
		}
	}
	if t.StatusTopic != "" {
		if err := check("telemetry.status_topic", t.StatusTopic); err != nil {
			return err
		}
	}
	if _, err := telemetry.ParseTimeUnit(string(t.TimeUnit)); err != nil {
		return fmt.Errorf("%w: telemetry.time_unit: %q: want auto, s, ms, us or ns", ErrConfig, t.TimeUnit)
	}
	return nil
}

// Check reports what New refuses before it starts anything: Validate,
// then the files the configuration names (checkFiles) and a data_dir
// that is not a directory. `edge-agent config check` runs it, so that a
// configuration it calls valid gets past New (a port in use is found
// when the agent binds it).
func (c Config) Check() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := c.checkFiles(); err != nil {
		return err
	}
	return checkDataDir(c.DataDir)
}

// checkDataDir refuses a data_dir that exists and is not a directory
// (one that does not exist yet is made at start).
func checkDataDir(dir string) error {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("%w: data_dir: %s is a file, not a directory: choose a directory for the store", ErrConfig, dir)
	}
	return nil
}

// checkFiles makes sure that every credential and TLS file the
// configuration names can be read, and that a named password variable is
// set, so that a typo exits at start (status 2) naming the YAML key rather
// than failing later in a reconnect loop.
func (c Config) checkFiles() error {
	type file struct{ key, path string }
	var files []file
	if c.Telemetry.Enabled {
		t := c.Telemetry
		files = append(files, file{"telemetry.password_file", t.PasswordFile}, file{"telemetry.ca_file", t.CAFile},
			file{"telemetry.cert_file", t.CertFile}, file{"telemetry.key_file", t.KeyFile})
		if t.PasswordEnv != "" {
			if _, ok := os.LookupEnv(t.PasswordEnv); !ok {
				return fmt.Errorf("%w: telemetry.password_env: environment variable %s is not set", ErrConfig, t.PasswordEnv)
			}
		}
	}
	if c.Central.URL != "" {
		ce := c.Central
		files = append(files, file{"central.creds_file", ce.CredsFile}, file{"central.nkey_seed_file", ce.NkeySeedFile},
			file{"central.password_file", ce.PasswordFile}, file{"central.ca_file", ce.CAFile},
			file{"central.cert_file", ce.CertFile}, file{"central.key_file", ce.KeyFile})
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		fh, err := os.Open(f.path)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConfig, f.key, err)
		}
		fh.Close()
	}
	return nil
}

// nested puts the error of a part's own validation under its YAML key,
// naming the part once: "video: video: invalid config: listen: …" becomes
// "video: listen: …".
func nested(key string, err, partConfig error) error {
	msg := strings.TrimPrefix(err.Error(), partConfig.Error()+": ")
	return fmt.Errorf("%w: %s: %s", ErrConfig, key, msg)
}
