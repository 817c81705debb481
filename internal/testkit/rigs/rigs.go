// Package rigs holds the test rigs built on the project's packages: a real
// Badger store (OpenStore, OpenStream) and an embedded JetStream server
// (StartCentral), closed when the test ends. It is apart from testkit so
// that testkit imports nothing of the project and localstream's and
// central's own tests can use it.
//
// It is imported by tests only.
package rigs

import (
	"log/slog"
	"testing"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/localstream"
)

// OpenStore opens a real Badger store in dir (logs discarded unless
// opts.Logger is set), closed when the test ends (Close is idempotent, so
// a test may close it earlier).
func OpenStore(t testing.TB, dir string, opts localstream.Options) *localstream.Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := localstream.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// OpenStream is OpenStore with one stream created (or opened) in it.
func OpenStream(t testing.TB, dir string, opts localstream.Options, name string, cfg localstream.StreamConfig) (*localstream.Store, *localstream.Stream) {
	t.Helper()
	s := OpenStore(t, dir, opts)
	st, err := s.CreateStream(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

// StartCentral starts an embedded JetStream server (package central) on
// a free loopback port with its files in a temporary directory, unless
// cfg says otherwise; it stops when the test ends.
func StartCentral(t testing.TB, cfg central.Config) *central.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	s, err := central.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
