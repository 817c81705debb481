package main

import (
	"context"
	"crypto/ed25519"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/flight"
	"github.com/edge-agent/edge-agent/internal/testkit/flyrig"
)

// TestFlightCommands: a key, the drone's flights, the export of its
// flight (file and certificate), verify with the right key, with another
// key, and against the centre; a failed export leaves no file.
func TestFlightCommands(t *testing.T) {
	var url string
	var nc *nats.Conn
	_, throwaway, _ := ed25519.GenerateKey(nil)
	fl := flyrig.Fly(t, flyrig.Options{
		Link: func(addr string) string { url = "nats://" + addr; return addr },
		Landed: func() bool {
			if nc == nil {
				var err error
				if nc, err = nats.Connect(url); err != nil {
					return false
				}
				t.Cleanup(nc.Close)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			f, err := flight.Find(ctx, nc, flight.FindOptions{Drone: flyrig.Drone})
			if err != nil || len(f) != 1 {
				return false
			}
			res, err := flight.Export(ctx, nc, f[0], flight.ExportOptions{FindOptions: flight.FindOptions{Drone: flyrig.Drone}, Key: throwaway}, io.Discard)
			return err == nil && res.Certificate.Status == flight.StatusComplete
		},
	})
	central := fl.Central.ClientURL()
	dir := t.TempDir()
	key, other := filepath.Join(dir, "centre.key"), filepath.Join(dir, "other.key")
	for _, k := range []string{key, other} {
		if code, out, errs := run(t, "flight-key", "-o", k); code != 0 || !strings.Contains(out, "wrote") {
			t.Fatalf("flight-key: %d %s %s", code, out, errs)
		}
	}
	if code, _, errs := run(t, "flight-key", "-o", key); code != 2 || !strings.Contains(errs, "exists") {
		t.Fatalf("flight-key over an existing key: %d %s", code, errs)
	}
	code, out, errs := run(t, "flights", "--central", central, "--drone", flyrig.Drone)
	if code != 0 || !strings.Contains(out, "complete") || !strings.Contains(out, flyrig.Agent) || strings.Count(out, "\n") != 2 {
		t.Fatalf("flights: %d\n%s%s", code, out, errs)
	}
	rec := filepath.Join(dir, "flight.mcap")
	code, out, errs = run(t, "export", "flight", "--central", central, "--drone", flyrig.Drone, "--flight", "1", "--key", key,
		"-o", rec, "--tlog", filepath.Join(dir, "flight.tlog"))
	if code != 0 || !strings.Contains(out, "complete") {
		t.Fatalf("export flight: %d\n%s%s", code, out, errs)
	}
	for _, f := range []string{rec, rec + ".cert.json", filepath.Join(dir, "flight.tlog")} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if code, out, errs = run(t, "verify", rec, "--pubkey", key+".pub"); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("verify: %d\n%s%s", code, out, errs)
	}
	if code, out, _ = run(t, "verify", rec, "--pubkey", other+".pub"); code != 1 || !strings.Contains(out, "not a trusted key") {
		t.Fatalf("verify with another key: %d\n%s", code, out)
	}
	if code, out, errs = run(t, "verify", rec, "--pubkey", key+".pub", "--central", central); code != 0 || !strings.Contains(out, "exactly what the certificate says") {
		t.Fatalf("verify --central: %d\n%s%s", code, out, errs)
	}
	// A failed export leaves nothing behind.
	bad := filepath.Join(dir, "none.mcap")
	if code, _, errs = run(t, "export", "flight", "--central", central, "--drone", "drone-404", "--flight", "1", "--key", key, "-o", bad); code != 1 || !strings.Contains(errs, "no such flight") {
		t.Fatalf("export of an unknown drone: %d %s", code, errs)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 7 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("the directory holds %v after a failed export", names)
	}
}
