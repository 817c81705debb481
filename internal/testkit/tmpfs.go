package testkit

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// MountTmpfs mounts a tmpfs of size bytes at dir (made if missing), a
// small real filesystem for disk-full tests, unmounted when the test
// ends. It skips the test, saying why, where the machine forbids mounting
// (not root, no CAP_SYS_ADMIN).
func MountTmpfs(t testing.TB, dir string, size int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Skipf("cannot mount a tmpfs at %s (%v): needs root or CAP_SYS_ADMIN", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}
