package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// shutdownBound is what SIGTERM may take beyond central.shutdown_timeout
// (the final commit's deadline): stopping intake, flushing marks, closing
// the central connection and the store. Measured well under a second; the
// bound is generous for a loaded machine.
const shutdownBound = 5 * time.Second

// shutdownTimeout is central.shutdown_timeout in these tests.
const shutdownTimeout = 2 * time.Second

// shutdownRig is one agent subprocess and what it talks to.
type shutdownRig struct {
	t        *testing.T
	id       string // agent id: one per test, so that no two share a chain at the centre
	dir      string // data directory
	httpPort int
	cfgPath  string
	broker   string // MQTT URL
	central  string // NATS URL
}

// fillTo grows a filler file in dir until the filesystem has about free bytes left.
func fillTo(t *testing.T, dir string, free int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*st.Bsize - free
	f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
		t.Fatal(err)
	}
}

// writeConfig writes the agent's configuration: tele adds fields to the
// telemetry section, extra adds sections.
func (r *shutdownRig) writeConfig(tele, extra string) {
	os.WriteFile(r.cfgPath, []byte(fmt.Sprintf(`agent_id: %s
data_dir: %s
http: {listen: "127.0.0.1:%d"}
video: {listen: "127.0.0.1:0", rtcp_listen: mux}
telemetry: {broker: %q, max_reconnect_interval: 1s %s}
central: {url: %q, shutdown_timeout: %s, embedded: {listen: "127.0.0.1:0"}}
%s
`, r.id, r.dir, r.httpPort, r.broker, tele, r.central, shutdownTimeout, extra)), 0o644)
}

// status reads /status.
func (r *shutdownRig) status() (agent.Status, error) { return agentStatus(r.httpPort) }

// healthz returns /healthz's status code and body.
func (r *shutdownRig) healthz() (int, string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", r.httpPort))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b [512]byte
	n, _ := resp.Body.Read(b[:])
	return resp.StatusCode, string(b[:n])
}

// waitStatus polls /status until cond holds (the blocking state is reached).
func (r *shutdownRig) waitStatus(what string, cond func(agent.Status) bool) {
	r.t.Helper()
	var s agent.Status
	var err error
	if !testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { s, err = r.status(); return err == nil && cond(s) }) {
		r.t.Fatalf("agent never reached %s: %+v %v", what, s, err)
	}
}

// term sends SIGTERM and measures the time to exit; it fails the test if
// the agent exits non-zero or later than shutdown_timeout + shutdownBound.
func (r *shutdownRig) term(cmd *exec.Cmd, state string) time.Duration {
	r.t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	go func() { done <- cmd.Wait() }()
	limit := shutdownTimeout + shutdownBound
	select {
	case err := <-done:
		took := time.Since(start)
		if err != nil {
			r.t.Fatalf("%s: after SIGTERM: %v (want exit status 0)", state, err)
		}
		r.t.Logf("%s: SIGTERM → exit 0 in %v (bound %v)", state, took.Round(time.Millisecond), limit)
		return took
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		r.t.Fatalf("%s: the agent did not exit within %v of SIGTERM", state, limit)
	}
	return 0
}

// start runs the agent as a subprocess and waits for /healthz; its log
// goes to agent.log, shown if the test fails; it is killed at cleanup if
// still running.
func (r *shutdownRig) start() *exec.Cmd {
	r.t.Helper()
	logPath := filepath.Join(filepath.Dir(r.cfgPath), "agent.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := agentCommand(context.Background(), "run", "--config", r.cfgPath)
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		logf.Close()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if r.t.Failed() {
			b, _ := os.ReadFile(logPath)
			r.t.Logf("agent log:\n%s", b[max(0, len(b)-8000):])
		}
	})
	if !testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { code, _ := r.healthz(); return code == http.StatusOK }) {
		r.t.Fatal("agent did not answer /healthz")
	}
	return cmd
}

func newShutdownRig(t *testing.T, brokerURL, centralURL string) *shutdownRig {
	dir := t.TempDir()
	id := "shutdown-" + strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()[len("TestSIGTERMInEveryBlockingState/"):]))
	return &shutdownRig{t: t, id: id, dir: filepath.Join(dir, "agent"), httpPort: freePort(t),
		cfgPath: filepath.Join(dir, "agent.yaml"), broker: brokerURL, central: centralURL}
}

// TestSIGTERMInEveryBlockingState: SIGTERM ends the agent (a real
// subprocess, the signal really sent) within central.shutdown_timeout + a
// bound, with exit status 0, in each state where something waits: the disk
// full with telemetry waiting for space, the centre away, the broker away,
// and full telemetry queues. Each state is proven reached through /status
// before the signal. With the disk full, nothing acknowledged is lost: the
// held messages are stored exactly once by the next run.
//
// On main the disk-full and queue-full states hung until SIGKILL: the
// dispatcher waited for space with a context cancelled only on a store error.
func TestSIGTERMInEveryBlockingState(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	csrv := rigs.StartCentral(t, central.Config{DataDir: t.TempDir()})
	nobody := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // nothing listens here: the centre away

	t.Run("disk-full", func(t *testing.T) {
		r := newShutdownRig(t, brk.URL(), csrv.ClientURL())
		testkit.MountTmpfs(t, r.dir, 48<<20)
		r.writeConfig("", `store: {min_free_bytes: 8388608}
devices: {disk: {retain_below: 16MiB, shed_below: 12MiB, interval: 200ms}}`)
		cmd := r.start()
		fillTo(t, r.dir, 4<<20) // another process takes the disk below the floor
		r.waitStatus("the store's floor", func(s agent.Status) bool { return s.Store.BelowFloor })
		if code, body := r.healthz(); code != http.StatusServiceUnavailable {
			t.Fatalf("/healthz below the floor: %d %q, want 503", code, body)
		} else {
			t.Logf("/healthz: %d %s", code, body)
		}
		res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Count: 20, Rate: 200, NoStatus: true})
		if err != nil {
			t.Fatal(err)
		}
		r.waitStatus("telemetry waiting for space", func(s agent.Status) bool {
			return s.Telemetry != nil && s.Telemetry.DiskFullWaits > 0
		})
		r.term(cmd, "disk full, telemetry waiting for space")

		// Space back: the next run stores every held message exactly once.
		if err := os.Remove(filepath.Join(r.dir, "filler")); err != nil {
			t.Fatal(err)
		}
		cmd = r.start()
		r.waitStatus("the held telemetry stored", func(s agent.Status) bool {
			return s.Telemetry != nil && s.Telemetry.Appended >= res.Published
		})
		r.term(cmd, "space back")
		checkHeld(t, r.dir, res)
	})

	t.Run("centre-away", func(t *testing.T) {
		r := newShutdownRig(t, brk.URL(), "nats://"+nobody)
		r.writeConfig("", "")
		cmd := r.start()
		if _, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Count: 10, Rate: 200, NoStatus: true, FirstSeq: 100}); err != nil {
			t.Fatal(err)
		}
		r.waitStatus("telemetry stored while the centre is away", func(s agent.Status) bool {
			for _, st := range s.Streams {
				if st.Name == "telemetry" && st.Stats.Appended > 0 && !s.CentralConnected {
					return true
				}
			}
			return false
		})
		if took := r.term(cmd, "centre away"); took < shutdownTimeout {
			t.Logf("note: exited before shutdown_timeout (%v)", took)
		}
	})

	t.Run("broker-away", func(t *testing.T) {
		away, err := broker.Start(ctx, broker.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := newShutdownRig(t, away.URL(), csrv.ClientURL())
		r.writeConfig("", "")
		cmd := r.start()
		away.Stop()
		r.waitStatus("the broker gone", func(s agent.Status) bool {
			return s.Telemetry != nil && s.Telemetry.ConnectionLost > 0
		})
		time.Sleep(1500 * time.Millisecond) // the test's moment: SIGTERM while it reconnects
		r.term(cmd, "broker away")
	})

	t.Run("queue-full", func(t *testing.T) {
		r := newShutdownRig(t, brk.URL(), csrv.ClientURL())
		testkit.MountTmpfs(t, r.dir, 48<<20)
		r.writeConfig(", lane_depth: 2", `store: {min_free_bytes: 8388608}
devices: {disk: {retain_below: 16MiB, shed_below: 12MiB, interval: 200ms}}`)
		cmd := r.start()
		fillTo(t, r.dir, 4<<20) // the store refuses: the lanes fill up behind it
		r.waitStatus("the store's floor", func(s agent.Status) bool { return s.Store.BelowFloor })
		if _, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 1, Count: 50, Rate: 1000, NoStatus: true, FirstSeq: 200}); err != nil {
			t.Fatal(err)
		}
		r.waitStatus("a full telemetry queue", func(s agent.Status) bool {
			return s.Telemetry != nil && s.Telemetry.LaneFullWaits > 0
		})
		r.term(cmd, "queue full")
	})
}

// checkHeld opens the stopped agent's store and checks that every message
// the simulator published is stored exactly once.
func checkHeld(t *testing.T, dir string, res mqttsim.Result) {
	t.Helper()
	recs := storedRecords(t, filepath.Join(dir, "store"))
	seen := map[string]int{}
	for _, rec := range recs {
		var m mqttsim.Telemetry
		if json.Unmarshal(rec.Payload, &m) == nil {
			seen[fmt.Sprintf("%s/%d", m.Drone, m.Seq)]++
		}
	}
	for d, dr := range res.Drones {
		for seq := dr.FirstSeq; seq <= dr.LastSeq; seq++ {
			if n := seen[fmt.Sprintf("%s/%d", d, seq)]; n != 1 {
				t.Fatalf("message %s/%d stored %d times", d, seq, n)
			}
		}
	}
	if len(seen) != int(res.Published) {
		t.Fatalf("%d messages stored, %d published", len(seen), res.Published)
	}
	t.Logf("all %d messages held during the full disk stored exactly once", len(seen))
}
