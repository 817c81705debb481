package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// childRoleEnv names the role a test binary runs in as a child process.
const childRoleEnv = "EDGE_TESTKIT_CHILD"

// Main is a package's TestMain: run as a child (ChildCommand), the binary
// runs its role's function and exits with the status it returns; otherwise
// it runs the tests.
func Main(m *testing.M, roles map[string]func() int) {
	if role := os.Getenv(childRoleEnv); role != "" {
		f, ok := roles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "testkit: no child role %q\n", role)
			os.Exit(2)
		}
		os.Exit(f())
	}
	os.Exit(m.Run())
}

// ChildCommand is the test binary to run again in role (see Main), no test
// selected, with env (KEY=VALUE) added to this process's environment. The
// caller sets its outputs and starts it.
func ChildCommand(role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childRoleEnv+"="+role), env...)
	return cmd
}

// KilledBySIGKILL reports whether the waited-for cmd died of SIGKILL: a
// crash test proves its fault happened (a child that exited by itself
// first was not killed).
func KilledBySIGKILL(cmd *exec.Cmd) bool {
	if cmd.ProcessState == nil {
		return false
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
