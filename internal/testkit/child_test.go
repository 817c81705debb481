package testkit

import (
	"bufio"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Main(m, map[string]func() int{
		"block": func() int { fmt.Println("ready"); time.Sleep(time.Minute); return 0 },
		"exit":  func() int { return 0 },
	})
}

// A child in a role is killed by SIGKILL and that is seen; one that exits
// by itself is not taken for killed.
func TestChildKilled(t *testing.T) {
	cmd := ChildCommand("block", "EDGE_TESTKIT_X=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child did not start its role: %q", sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !KilledBySIGKILL(cmd) {
		t.Fatalf("killed child: state %v", cmd.ProcessState)
	}
	done := ChildCommand("exit")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	if KilledBySIGKILL(done) {
		t.Fatal("a child that exited is taken for killed")
	}
}

func TestWaitForAndSyncBuffer(t *testing.T) {
	var b SyncBuffer
	go func() {
		for range 100 {
			fmt.Fprint(&b, "x")
		}
	}()
	WaitFor(t, 10*time.Second, "100 writes", func() bool { return len(b.String()) == 100 })
}

func TestUntil(t *testing.T) {
	if !Until(time.Second, func() bool { return true }) {
		t.Fatal("a condition that holds is reported as not holding")
	}
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds is reported as holding")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the 50ms given", waited)
	}
	polls := 0
	if UntilEvery(250*time.Millisecond, 100*time.Millisecond, func() bool { polls++; return false }) || polls > 4 {
		t.Fatalf("polled %d times in 250ms at a 100ms period", polls)
	}
}
