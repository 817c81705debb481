package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bluenviron/gomavlib/v3/pkg/dialect"
	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/bluenviron/gomavlib/v3/pkg/tlog"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// readTlogFile reads every entry of a tlog.
func readTlogFile(t *testing.T, path string) []mavlink.TlogEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := mavlink.NewTlogReader(f, nil)
	var out []mavlink.TlogEntry
	for {
		e, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e.Frame = append([]byte(nil), e.Frame...)
		out = append(out, e)
	}
}

// readTlogGomavlib reads a tlog with gomavlib's reader and dialect.
func readTlogGomavlib(t *testing.T, path string) []*tlog.Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rw := &dialect.ReadWriter{Dialect: ardupilotmega.Dialect}
	if err := rw.Initialize(); err != nil {
		t.Fatal(err)
	}
	r := &tlog.Reader{ByteReader: f, DialectRW: rw}
	if err := r.Initialize(); err != nil {
		t.Fatal(err)
	}
	var out []*tlog.Entry
	for {
		e, err := r.Read()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("gomavlib reading %s, entry %d: %v", path, len(out), err)
		}
		out = append(out, e)
	}
}

// TestTlogRoundTrip: the tlog gomavlib wrote (testdata/mavlink, two
// vehicles, MAVLink 1 and 2) replayed with `edge-agent replay --tlog` to
// `edge-agent run`, replicated to the centre and exported per drone with
// `edge-agent export telemetry --format tlog` gives back each vehicle's
// entries: the same frames, byte for byte, with the same timestamps, in
// order — as this project reads them, as gomavlib's tlog reader reads
// them, and as node-mavlink's (npm) does. `edge-agent read` prints them as
// decoded MAVLink.
func TestTlogRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	csrv := rigs.StartCentral(t, central.Config{DataDir: filepath.Join(dir, "central")})
	httpPort, tlogPort := freePort(t), freePort(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: tlog-trip
data_dir: %s
http: {listen: "127.0.0.1:%d"}
log: {level: warn}
store: {min_free_bytes: 16777216}
video: {enabled: false}
telemetry: {enabled: false}
mavlink: {enabled: true, udp_listen: "", tlog_listen: "127.0.0.1:%d", drones: {1: copter-1}}
central: {url: %q, shutdown_timeout: 10s}
devices: {disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, filepath.Join(dir, "agent"), httpPort, tlogPort, csrv.ClientURL())), 0o644)
	cmd := startRun(t, cfgPath, httpPort)
	defer cmd.Process.Kill()

	src := filepath.Join("..", "..", "testdata", "mavlink", "flight.tlog")
	var out bytes.Buffer
	if err := runReplay(ctx, []string{"--tlog", src, "--to", fmt.Sprintf("tlog://127.0.0.1:%d", tlogPort), "--speed", "max", "--quiet"}, &out, io.Discard); err != nil {
		t.Fatalf("replay: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	cmd.Process.Signal(syscall.SIGTERM) // the final commit: everything at the centre
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}

	orig := readTlogFile(t, src)
	exported, wanted := map[string]string{}, map[string][]mavlink.TlogEntry{}
	for sysid, drone := range map[uint8]string{1: "copter-1", 2: mavlink.DiscoveredID(2)} {
		var want []mavlink.TlogEntry
		for _, e := range orig {
			if e.Frame[map[bool]int{true: 5, false: 3}[e.Frame[0] == 0xFD]] == sysid {
				want = append(want, e)
			}
		}
		path := filepath.Join(dir, drone+".tlog")
		if err := runExport(ctx, []string{"telemetry", "--central", csrv.ClientURL(), "--agent", "tlog-trip", "--drone", drone, "--format", "tlog", "-o", path}, io.Discard, io.Discard); err != nil {
			t.Fatalf("export %s: %v", drone, err)
		}
		got := readTlogFile(t, path)
		if len(got) != len(want) {
			t.Fatalf("%s: %d entries exported, %d in the original", drone, len(got), len(want))
		}
		for i := range want {
			if !got[i].Time.Equal(want[i].Time) || !bytes.Equal(got[i].Frame, want[i].Frame) {
				t.Fatalf("%s entry %d: %v % x, original %v % x", drone, i, got[i].Time, got[i].Frame, want[i].Time, want[i].Frame)
			}
		}
		t.Logf("%s: %d entries, same frames and timestamps", drone, len(got))
		exported[drone], wanted[drone] = path, want
	}
	// Readers that are not this project's: gomavlib's tlog reader (its
	// frame parser, checksums and message decoding) reads the exports as
	// it reads the original; node-mavlink's tlog splitter (npm) finds
	// every entry, checksum right, with its time and bytes.
	t.Run("gomavlib", func(t *testing.T) {
		orig := readTlogGomavlib(t, src)
		for sysid, drone := range map[uint8]string{1: "copter-1", 2: mavlink.DiscoveredID(2)} {
			var want []*tlog.Entry
			for _, e := range orig {
				if e.Frame.GetSystemID() == sysid {
					want = append(want, e)
				}
			}
			got := readTlogGomavlib(t, exported[drone])
			if len(got) != len(want) {
				t.Fatalf("%s: gomavlib read %d entries of the export, %d of the original", drone, len(got), len(want))
			}
			for i := range want {
				if !got[i].Time.Equal(want[i].Time) || !reflect.DeepEqual(got[i].Frame, want[i].Frame) {
					t.Fatalf("%s entry %d: gomavlib read %v %+v, original %v %+v", drone, i, got[i].Time, got[i].Frame, want[i].Time, want[i].Frame)
				}
			}
			t.Logf("%s: gomavlib read %d entries, equal to the original's", drone, len(got))
		}
	})
	t.Run("node-mavlink", func(t *testing.T) {
		nodeDir := nodeMAVLink(t)
		for drone, path := range exported {
			want := wanted[drone]
			cmd := exec.Command("node", "tlogread.js", path)
			cmd.Dir = nodeDir
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node tlogread.js %s: %v", path, err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if last := lines[len(lines)-1]; last != fmt.Sprintf("valid %d invalid 0 unknown 0", len(want)) {
				t.Fatalf("%s: node-mavlink: %q, want %d valid entries", drone, last, len(want))
			}
			for i, l := range lines[:len(lines)-1] {
				f := strings.Fields(l)
				if len(f) != 4 || f[0] != strconv.FormatInt(want[i].Time.UnixMilli(), 10) || f[3] != hex.EncodeToString(want[i].Frame) {
					t.Fatalf("%s entry %d: node-mavlink read %q, want time %d ms and % x", drone, i, l, want[i].Time.UnixMilli(), want[i].Frame)
				}
			}
			t.Logf("%s: node-mavlink read %d entries, times and bytes as the original's", drone, len(want))
		}
	})

	var lines bytes.Buffer
	if err := runRead(ctx, []string{"--central", csrv.ClientURL(), "--stream", "telemetry", "--agent", "tlog-trip", "--drone", "copter-1"}, &lines, io.Discard); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	sc := bufio.NewScanner(&lines)
	for sc.Scan() {
		var l struct {
			Type    string           `json:"type"`
			MAVLink *mavlink.Message `json:"mavlink"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("read printed %q: %v", sc.Text(), err)
		}
		if l.Type == "event" {
			if l.MAVLink == nil {
				t.Fatalf("event without its decoded MAVLink: %s", sc.Text())
			}
			names[l.MAVLink.Name]++
			if l.MAVLink.Name == "GLOBAL_POSITION_INT" && l.MAVLink.Fields["lat"] == nil {
				t.Fatalf("GLOBAL_POSITION_INT without lat: %s", sc.Text())
			}
		}
	}
	if names["HEARTBEAT"] != 20 || names["GLOBAL_POSITION_INT"] != 200 || names["ATTITUDE"] != 400 {
		t.Fatalf("read printed messages %v", names)
	}
}
