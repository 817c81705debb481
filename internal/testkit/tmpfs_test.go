package testkit

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A mounted tmpfs is its own filesystem of the size asked, and fills:
// a write past its size fails with ENOSPC.
func TestMountTmpfs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fs")
	MountTmpfs(t, dir, 1<<20)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC || int64(st.Blocks)*st.Bsize != 1<<20 {
		t.Fatalf("statfs: type %#x, %d bytes", st.Type, int64(st.Blocks)*st.Bsize)
	}
	err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o600)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 2 MiB into 1 MiB: %v, want ENOSPC", err)
	}
}
