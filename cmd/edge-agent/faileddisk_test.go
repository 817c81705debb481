package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// loopExt4 is an ext4 filesystem in an image file on a loop device.
type loopExt4 struct {
	t     *testing.T
	image string
	dev   string // /dev/loopN
	dir   string // mount point
}

// mountLoopExt4 makes an ext4 image of size bytes, attaches it to a loop
// device and mounts it at dir with errors=remount-ro (a failing disk then
// turns read-only, as on a station); unmounted and detached at cleanup.
// It skips the test, with the reason, where that cannot be done: not
// root, no losetup or mkfs.ext4, no free loop device.
func mountLoopExt4(t *testing.T, dir string, size int64) *loopExt4 {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a loop-device ext4 needs root")
	}
	for _, bin := range []string{"losetup", "mkfs.ext4", "e2fsck"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("a loop-device ext4 needs %s: %v", bin, err)
		}
	}
	l := &loopExt4{t: t, image: filepath.Join(t.TempDir(), "disk.img"), dir: dir}
	if err := os.WriteFile(l.image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(l.image, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", l.image).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", l.image).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: losetup: %v: %s", err, out)
	}
	l.dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", l.dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", l.dev, err, out)
		}
	})
	l.mount()
	return l
}

func (l *loopExt4) mount() {
	l.t.Helper()
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		l.t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "errors=remount-ro", l.dev, l.dir).CombinedOutput(); err != nil {
		l.t.Fatalf("mount %s: %v: %s", l.dev, err, out)
	}
	l.t.Cleanup(func() { l.unmount() })
}

// unmount unmounts the filesystem if it is mounted.
func (l *loopExt4) unmount() {
	if exec.Command("mountpoint", "-q", l.dir).Run() != nil {
		return
	}
	if out, err := exec.Command("umount", l.dir).CombinedOutput(); err != nil {
		l.t.Errorf("umount %s: %v: %s", l.dir, err, out)
	}
}

// fail forces the filesystem into an error, as a failing disk does: with
// errors=remount-ro the kernel remounts it read-only.
func (l *loopExt4) fail() {
	l.t.Helper()
	path := filepath.Join("/sys/fs/ext4", filepath.Base(l.dev), "trigger_fs_error")
	if err := os.WriteFile(path, []byte("1"), 0o200); err != nil {
		l.t.Skipf("cannot force an ext4 error (%s): %v", path, err)
	}
}

// repair unmounts, checks and mounts the filesystem again, as an operator
// does after the failure.
func (l *loopExt4) repair() {
	l.t.Helper()
	l.unmount()
	out, err := exec.Command("e2fsck", "-fy", l.dev).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() <= 2) { // 1, 2: errors corrected
		l.t.Fatalf("e2fsck: %v: %s", err, out)
	}
	l.t.Logf("e2fsck: %s", strings.TrimSpace(string(out)))
	l.mount()
}

// waitHealthz polls /healthz until it answers code, and returns how long
// that took and the body; it fails the test after limit.
func (r *shutdownRig) waitHealthz(code int, limit time.Duration) (time.Duration, string) {
	r.t.Helper()
	client := &http.Client{Timeout: time.Second}
	start := time.Now()
	var last, body string
	if !testkit.UntilEvery(limit, 20*time.Millisecond, func() bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", r.httpPort))
		if err != nil {
			last = err.Error()
			return false
		}
		var b [512]byte
		n, _ := resp.Body.Read(b[:])
		resp.Body.Close()
		body, last = string(b[:n]), fmt.Sprintf("%d %q", resp.StatusCode, b[:n])
		return resp.StatusCode == code
	}) {
		r.t.Fatalf("/healthz did not answer %d within %v (last: %s)", code, limit, last)
	}
	return time.Since(start), body
}

// TestFailingDisk: the data directory's disk fails under a running agent
// with telemetry flowing through a real Mosquitto. The store's failure is
// an alarm — /healthz 503 with the reason within a second or two, /status
// says it — and a clean stop: SIGTERM ends the process within
// central.shutdown_timeout + shutdownBound, and after the disk is repaired
// (e2fsck) and the agent restarted, every message the broker acknowledged
// to the drones is at the centre exactly once.
//
// On main (fc99d4c) /healthz and /status stopped answering and SIGTERM
// did not end the process: Badger retried its memtable flush forever.
func TestFailingDisk(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if errors.Is(err, broker.ErrNoBinary) {
		t.Skipf("mosquitto: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	csrv := rigs.StartCentral(t, central.Config{})

	t.Run("fs-error", func(t *testing.T) {
		dir := t.TempDir()
		r := &shutdownRig{t: t, id: "failing-disk", dir: filepath.Join(dir, "mnt", "agent"), httpPort: freePort(t),
			cfgPath: filepath.Join(dir, "agent.yaml"), broker: brk.URL(), central: csrv.ClientURL()}
		disk := mountLoopExt4(t, filepath.Dir(r.dir), 256<<20)
		r.writeConfig("", `store: {min_free_bytes: 8388608}
devices: {disk: {retain_below: 32MiB, shed_below: 16MiB, interval: 200ms}}`)
		cmd := r.start()

		sim := make(chan mqttsim.Result, 1)
		go func() {
			res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 200,
				Duration: 4 * time.Second, NoStatus: true, DronePrefix: "fail-"})
			if err != nil {
				t.Error(err)
			}
			sim <- res
		}()
		r.waitStatus("telemetry flowing", func(s agent.Status) bool { return s.Telemetry != nil && s.Telemetry.Appended > 100 })
		disk.fail()
		took, body := r.waitHealthz(http.StatusServiceUnavailable, 5*time.Second)
		t.Logf("disk failed: /healthz 503 after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(body))
		if !strings.Contains(body, "store") {
			t.Errorf("/healthz 503 without the store's reason: %q", body)
		}
		s, err := r.status()
		if err != nil {
			t.Fatalf("/status after the failure: %v", err)
		}
		if s.Store.Failed == "" || s.Errors["store"] == "" {
			t.Errorf("/status after the failure: store.failed %q, errors.store %q: want the reason", s.Store.Failed, s.Errors["store"])
		}
		res := <-sim
		t.Logf("the drones published %d messages (acknowledged by the broker)", res.Published)
		r.termFailed(cmd, "disk failed")
		r.checkBadgerNoise()

		disk.repair()
		cmd = r.start()
		r.waitStatus("the held telemetry stored", func(s agent.Status) bool {
			return s.Telemetry != nil && s.Telemetry.Appended > 0
		})
		waitCentre(t, csrv.ClientURL(), r.id, res)
		r.term(cmd, "after the repair")
	})
}

// checkBadgerNoise fails the test if Badger's retries of its memtable
// flush were logged more than once (they come every second).
func (r *shutdownRig) checkBadgerNoise() {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(r.cfgPath), "agent.log"))
	if err != nil {
		r.t.Fatal(err)
	}
	if n := strings.Count(string(b), "error flushing memtable"); n > 1 {
		r.t.Errorf("Badger's flush retries logged %d times: want at most once per 30 s", n)
	}
}

// TestRemovedDataDir: the data directory removed under a running agent,
// and under one stopping, with telemetry flowing through a real
// Mosquitto: /healthz 503 with the reason within a second or two, SIGTERM
// in bound, exit status 1 in both cases (the store failed: systemd
// restarts the agent), and after a restart (on a new, empty directory)
// every message the broker acknowledged to the drones is at the centre
// exactly once. A message stored and replicated whose PUBACK had not
// reached the broker comes again, marked as a redelivery
// (telemetry.HeaderRedelivered): the replicator finds its first copy in
// the centre's tail and does not send it again (repeats_dropped).
//
// On main (fc99d4c) a stopping agent whose data directory was removed was
// still running after 15 minutes; on main (2a25df7) it exited 0, and a
// message could be at the centre twice.
func TestRemovedDataDir(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if errors.Is(err, broker.ErrNoBinary) {
		t.Skipf("mosquitto: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	csrv, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := csrv.Start(); err != nil {
		t.Fatal(err)
	}
	defer csrv.Close()
	for _, stopping := range []bool{false, true} {
		name := map[bool]string{false: "running", true: "stopping"}[stopping]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// The centre through a link the stopping case takes down, so
			// that the agent's stop waits for its final commit while the
			// directory goes.
			link := testkit.NewProxy(t, strings.TrimPrefix(csrv.ClientURL(), "nats://"), testkit.ProxyHooks{})
			r := &shutdownRig{t: t, id: "removed-dir-" + name, dir: filepath.Join(dir, "agent"), httpPort: freePort(t),
				cfgPath: filepath.Join(dir, "agent.yaml"), broker: brk.URL(), central: "nats://" + link.Addr()}
			r.writeConfig("", "")
			cmd := r.start()
			sim := make(chan mqttsim.Result, 1)
			go func() {
				res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 200,
					Duration: 3 * time.Second, NoStatus: true, DronePrefix: "rm-" + name + "-"})
				if err != nil {
					t.Error(err)
				}
				sim <- res
			}()
			r.waitStatus("telemetry flowing", func(s agent.Status) bool { return s.Telemetry != nil && s.Telemetry.Appended > 100 })
			if stopping {
				// SIGTERM with the centre unreachable: the stop waits up
				// to shutdown_timeout for the final commit, and the
				// directory goes while it waits.
				logPath := filepath.Join(dir, "agent.log")
				stopped := func() int { b, _ := os.ReadFile(logPath); return strings.Count(string(b), "telemetry: stopped") }
				before := stopped()
				link.SetDown(true)
				link.Cut()
				cmd.Process.Signal(syscall.SIGTERM)
				if !testkit.Until(5*time.Second, func() bool { return stopped() > before }) {
					t.Fatal("the agent's intake never stopped after SIGTERM")
				}
			}
			if err := os.RemoveAll(r.dir); err != nil {
				t.Fatal(err)
			}
			if stopping {
				// The fault happened under a stopping agent, not after it.
				if exited(cmd.Process.Pid) {
					t.Fatal("the agent had exited before its directory was removed: the fault did not happen")
				}
				link.SetDown(false)
			}
			if !stopping {
				took, body := r.waitHealthz(http.StatusServiceUnavailable, 5*time.Second)
				t.Logf("data directory removed: /healthz 503 after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(body))
				if !strings.Contains(body, "data directory gone") {
					t.Errorf("/healthz 503 without the reason: %q", body)
				}
			}
			res := <-sim
			t.Logf("the drones published %d messages (acknowledged by the broker)", res.Published)
			if stopping {
				r.waitExitFailed(cmd, "stopping, data directory removed")
			} else {
				r.termFailed(cmd, "data directory removed")
			}
			cmd = r.start()
			// None lost, none twice: a message stored and replicated whose
			// PUBACK had not reached the broker when the directory went
			// comes again, marked, and is not sent again.
			waitCentre(t, csrv.ClientURL(), r.id, res)
			s, err := r.status()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after the restart: %d redeliveries stored marked, %d not sent again (first copy at the centre)",
				s.Telemetry.Redelivered, repeatsDropped(s))
			r.term(cmd, "after the restart")
		})
	}
}

// waitExitFailed waits for an agent already sent SIGTERM, whose store
// failed, to exit within shutdown_timeout + shutdownBound of now with
// status 1 (systemd restarts it).
func (r *shutdownRig) waitExitFailed(cmd *exec.Cmd, state string) {
	r.t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			r.t.Fatalf("%s: exited with %v, want exit status 1 (the store failed)", state, err)
		}
		r.t.Logf("%s: exit 1 in %v", state, time.Since(start).Round(time.Millisecond))
	case <-time.After(shutdownTimeout + shutdownBound):
		cmd.Process.Kill()
		<-done
		r.t.Fatalf("%s: the agent did not exit within %v", state, shutdownTimeout+shutdownBound)
	}
}

// termFailed sends SIGTERM to an agent whose store failed and checks that
// it exits within shutdown_timeout + shutdownBound with a non-zero status
// (the store failed: systemd restarts it).
func (r *shutdownRig) termFailed(cmd *exec.Cmd, state string) {
	r.t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	go func() { done <- cmd.Wait() }()
	limit := shutdownTimeout + shutdownBound
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			r.t.Fatalf("%s: after SIGTERM: %v, want exit status 1 (the store failed)", state, err)
		}
		r.t.Logf("%s: SIGTERM → exit 1 in %v (bound %v)", state, time.Since(start).Round(time.Millisecond), limit)
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		r.t.Fatalf("%s: the agent did not exit within %v of SIGTERM", state, limit)
	}
}

// waitCentre waits until every message of res is at the centre under
// agent id, and fails the test if some are still missing after 60 s or
// one is there more than once.
func waitCentre(t *testing.T, url, id string, res mqttsim.Result) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	missing := 0
	if !testkit.UntilEvery(60*time.Second, 200*time.Millisecond, func() bool {
		items, err := centralread.ReadAll(context.Background(), nc, "telemetry", centralread.ReadOptions{Agent: id})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string][]string{} // drone/seq → the copies' redelivery marks
		for _, it := range items {
			var m mqttsim.Telemetry
			rec := it.Event.Record
			if it.Kind == centralread.ItemEvent && json.Unmarshal(rec.Payload, &m) == nil {
				mark, _ := rec.Header(telemetry.HeaderRedelivered)
				k := fmt.Sprintf("%s/%d", m.Drone, m.Seq)
				seen[k] = append(seen[k], mark)
			}
		}
		missing = 0
		for d, dr := range res.Drones {
			for seq := dr.FirstSeq; seq <= dr.LastSeq; seq++ {
				k := fmt.Sprintf("%s/%d", d, seq)
				switch c := seen[k]; len(c) {
				case 0:
					missing++
				case 1:
				default:
					t.Fatalf("message %s %d times at the centre (redelivery marks %q)", k, len(c), c)
				}
			}
		}
		return missing == 0
	}) {
		t.Fatalf("%d of %d acknowledged messages missing at the centre after 60 s", missing, res.Published)
	}
	t.Logf("all %d acknowledged messages at the centre exactly once", res.Published)
}

// repeatsDropped is the telemetry stream's count of marked redeliveries
// not sent again because their first copy is at the centre.
func repeatsDropped(s agent.Status) uint64 {
	for _, st := range s.Streams {
		if st.Name == "telemetry" && st.Replication != nil {
			return st.Replication.RepeatsDropped
		}
	}
	return 0
}

// TestRemovedDataDirAcksLost: the agent stores and replicates messages
// whose PUBACKs never reach the broker (the link drops what the agent
// sends), is killed, and its data directory is removed: the restarted
// agent, on a new directory, gets those messages again (DUP) with no
// dedup record for them, and stores them marked as redeliveries
// (telemetry.HeaderRedelivered). Its replicator, which took the chain over
// from the lost store, read the centre's tail first: a marked redelivery
// whose first copy is there is not sent again. Every acknowledged message
// is at the centre exactly once; the fault is proven by the counters
// (telemetry.redelivered and the stream's repeats_dropped both > 0).
//
// On main (2a25df7) the centre held each such message twice, the second
// copy marked, and left it to consumers to drop.
func TestRemovedDataDirAcksLost(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if errors.Is(err, broker.ErrNoBinary) {
		t.Skipf("mosquitto: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	csrv, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := csrv.Start(); err != nil {
		t.Fatal(err)
	}
	defer csrv.Close()
	px := testkit.NewProxy(t, brk.Addr(), testkit.ProxyHooks{})
	dir := t.TempDir()
	r := &shutdownRig{t: t, id: "removed-dir-acks-lost", dir: filepath.Join(dir, "agent"), httpPort: freePort(t),
		cfgPath: filepath.Join(dir, "agent.yaml"), broker: "tcp://" + px.Addr(), central: csrv.ClientURL()}
	r.writeConfig("", "")
	cmd := r.start()
	sim := make(chan mqttsim.Result, 1)
	go func() {
		res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 200,
			Count: 600, NoStatus: true, DronePrefix: "acks-lost-"})
		if err != nil {
			t.Error(err)
		}
		sim <- res
	}()
	var atDrop uint64
	r.waitStatus("telemetry flowing", func(s agent.Status) bool {
		if s.Telemetry == nil {
			return false
		}
		atDrop = s.Telemetry.Appended
		return atDrop > 100
	})
	px.DropUp(true) // the agent's PUBACKs vanish from here on
	r.waitStatus("stored, replicated and not acknowledged", func(s agent.Status) bool {
		for _, st := range s.Streams {
			if st.Name == "telemetry" && st.Replication != nil {
				return s.Telemetry.Appended >= atDrop+50 && st.Replication.BacklogEvents == 0
			}
		}
		return false
	})
	cmd.Process.Kill()
	cmd.Wait()
	if err := os.RemoveAll(r.dir); err != nil {
		t.Fatal(err)
	}
	res := <-sim
	t.Logf("the drones published %d messages (acknowledged by the broker)", res.Published)
	r.broker = brk.URL() // the link is back
	r.writeConfig("", "")
	cmd = r.start()
	waitCentre(t, csrv.ClientURL(), r.id, res)
	s, err := r.status()
	if err != nil {
		t.Fatal(err)
	}
	dropped := repeatsDropped(s)
	t.Logf("after the restart: %d redeliveries stored marked, %d of them not sent again (first copy at the centre)", s.Telemetry.Redelivered, dropped)
	if s.Telemetry.Redelivered == 0 || dropped == 0 {
		t.Fatalf("telemetry.redelivered %d, repeats_dropped %d: the fault did not happen (want both > 0)", s.Telemetry.Redelivered, dropped)
	}
	if dropped > s.Telemetry.Redelivered {
		t.Errorf("repeats_dropped %d > telemetry.redelivered %d", dropped, s.Telemetry.Redelivered)
	}
	r.term(cmd, "after the restart")
}

// exited reports whether process pid has ended (a zombie not yet waited
// for, or gone).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}
