package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Broker is a running MQTT broker on 127.0.0.1. Its methods are safe for
// concurrent use.
type Broker struct {
	// opts are the options after defaults.
	opts Options
	// dir holds config, log and persistence.
	dir string
	// ownDir: dir was created by Start and is removed by Stop.
	ownDir bool
	// port is fixed for the broker's life, across restarts.
	port int
	// binary is the mosquitto path; "" when embedded.
	binary string

	// mu guards the fields below.
	mu sync.Mutex
	// cmd is the running mosquitto process (nil when embedded or stopped).
	cmd *exec.Cmd
	// exited is closed when cmd has been waited for.
	exited chan struct{}
	// emb is the embedded broker when the binary is absent.
	emb *embedded
	// stopped is set by Stop.
	stopped bool
	// restarts counts successful restarts.
	restarts int
}

// Start starts a broker and returns once it accepts connections. ctx bounds
// only the start-up; the broker runs until Stop.
func Start(ctx context.Context, opts Options) (*Broker, error) {
	opts = opts.withDefaults()
	b := &Broker{opts: opts, dir: opts.Dir}
	if b.dir == "" {
		d, err := os.MkdirTemp("", "edge-broker-")
		if err != nil {
			return nil, fmt.Errorf("broker: temp dir: %w", err)
		}
		b.dir, b.ownDir = d, true
	}
	if err := os.MkdirAll(filepath.Join(b.dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("broker: data dir: %w", err)
	}
	if !opts.Embedded {
		b.binary = findBinary(opts.Binary)
	}
	if b.binary == "" {
		if opts.NoFallback {
			b.cleanup()
			return nil, ErrNoBinary
		}
		opts.Logger.Warn("broker: mosquitto binary not found; using the embedded mochi-mqtt broker (no persistence across Restart)")
	}
	// A free port can be taken between probing and binding: retry a few times.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		b.port = opts.Port
		if b.port == 0 {
			if b.port, err = freePort(); err != nil {
				break
			}
		}
		if err = b.launch(ctx); err == nil || opts.Port != 0 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		b.cleanup()
		return nil, err
	}
	opts.Logger.Debug("broker: started", "url", b.URL(), "embedded", b.Embedded(), "dir", b.dir)
	return b, nil
}

// findBinary returns the mosquitto executable to use, or "".
func findBinary(explicit string) string {
	if explicit != "" {
		if _, err := os.Stat(explicit); err == nil {
			return explicit
		}
		return ""
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"} {
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("broker: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the broker process (or the embedded one) on b.port and waits
// until it accepts connections.
func (b *Broker) launch(ctx context.Context) error {
	if b.binary == "" {
		e, err := startEmbedded(b.Addr())
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.emb = e
		b.mu.Unlock()
		return waitReady(ctx, b.Addr(), nil)
	}
	conf := filepath.Join(b.dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(mosquittoConfig(b.opts, b.dir, b.port)), 0o644); err != nil {
		return fmt.Errorf("broker: write config: %w", err)
	}
	cmd := exec.Command(b.binary, "-c", conf)
	cmd.Dir = b.dir
	// Its own process group: a Ctrl-C to the test does not hit it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.OpenFile(filepath.Join(b.dir, "mosquitto.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("broker: output file: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("broker: start %s: %w", b.binary, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(exited)
	}()
	b.mu.Lock()
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	if err := waitReady(ctx, b.Addr(), exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		log, _ := os.ReadFile(filepath.Join(b.dir, "mosquitto.out"))
		return fmt.Errorf("%w: %s on port %d: %v; output: %s", err, b.binary, b.port, err, tail(log, 400))
	}
	return nil
}

// waitReady dials addr until it answers, the process exits, or ~10 s pass.
func waitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("%w: process exited", ErrNotReady)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			// The listener may belong to someone else if our process died on bind.
			select {
			case <-exited:
				return fmt.Errorf("%w: process exited", ErrNotReady)
			case <-time.After(20 * time.Millisecond):
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %v", ErrNotReady, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// URL is the broker's address as "tcp://127.0.0.1:<port>"; it does not
// change across restarts.
func (b *Broker) URL() string { return "tcp://" + b.Addr() }

// Addr is "127.0.0.1:<port>".
func (b *Broker) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// Port is the listening port.
func (b *Broker) Port() int { return b.port }

// Pid is the running mosquitto process's id (for measuring its CPU); 0
// when embedded or stopped.
func (b *Broker) Pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Dir is the directory holding the configuration, the log and the data.
func (b *Broker) Dir() string { return b.dir }

// Embedded reports whether this is the embedded fallback broker.
func (b *Broker) Embedded() bool { return b.binary == "" }

// Restarts reports how many restarts have completed.
func (b *Broker) Restarts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.restarts
}

// Restart stops the broker and starts it again on the same port with the
// same persistence directory. hard=false stops with SIGTERM (mosquitto saves
// its persistence file on the way out); hard=true kills with SIGKILL
// (anything since the last autosave is lost — that is mosquitto's contract).
// The embedded broker loses its sessions on Restart.
func (b *Broker) Restart(ctx context.Context, hard bool) error {
	if err := b.halt(hard); err != nil {
		return err
	}
	if err := b.launch(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	b.restarts++
	b.mu.Unlock()
	b.opts.Logger.Debug("broker: restarted", "url", b.URL(), "hard", hard)
	return nil
}

// Pause stops the broker (SIGTERM, or SIGKILL if hard) without restarting it;
// Resume starts it again on the same port. For tests of a broker outage.
func (b *Broker) Pause(hard bool) error { return b.halt(hard) }

// Resume starts a paused broker again on the same port.
func (b *Broker) Resume(ctx context.Context) error { return b.launch(ctx) }

// halt stops the process (or embedded server) and waits for it.
func (b *Broker) halt(hard bool) error {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return ErrStopped
	}
	cmd, exited, emb := b.cmd, b.exited, b.emb
	b.cmd, b.exited, b.emb = nil, nil, nil
	b.mu.Unlock()
	if emb != nil {
		return emb.close()
	}
	if cmd == nil {
		return nil
	}
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

// Stop stops the broker (SIGTERM) and removes its directory if Start made it.
// It is idempotent.
func (b *Broker) Stop() error {
	err := b.halt(false)
	if errors.Is(err, ErrStopped) {
		return nil
	}
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.cleanup()
	return err
}

func (b *Broker) cleanup() {
	if b.ownDir {
		_ = os.RemoveAll(b.dir)
	}
}

// LogTail returns the last n bytes of mosquitto's log file (for test failures).
func (b *Broker) LogTail(n int) string {
	data, _ := os.ReadFile(filepath.Join(b.dir, "mosquitto.log"))
	return tail(data, n)
}
