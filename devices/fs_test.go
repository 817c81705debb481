package devices

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// smallFS is a small filesystem for disk-full tests: a real tmpfs with a
// size limit when the test may mount one (root, and EDGE_DISKFULL_FS is not
// "fake"), else a directory on the ordinary disk whose free space is
// computed (injected) as size minus the blocks allocated under it.
type smallFS struct {
	// Dir is the filesystem's root.
	Dir string
	// Size is its capacity in bytes.
	Size int64
	// Real is true for a mounted tmpfs.
	Real bool
}

func newSmallFS(t testing.TB, size int64) *smallFS {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("EDGE_DISKFULL_FS") != "fake" {
		err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10))
		if err == nil {
			t.Cleanup(func() {
				if err := unix.Unmount(dir, 0); err != nil {
					t.Errorf("unmount %s: %v", dir, err)
				}
			})
			t.Logf("disk-full filesystem: tmpfs of %d MiB mounted at %s", size>>20, dir)
			return &smallFS{Dir: dir, Size: size, Real: true}
		}
		t.Logf("disk-full filesystem: mount tmpfs not permitted (%v): falling back to an injected free-space function", err)
	} else {
		t.Logf("disk-full filesystem: EDGE_DISKFULL_FS=fake: injected free-space function")
	}
	return &smallFS{Dir: dir, Size: size}
}

// Space returns free and total bytes: statfs on a tmpfs, else size minus
// the blocks allocated under Dir.
func (f *smallFS) Space(string) (free, total int64, err error) {
	if f.Real {
		var st unix.Statfs_t
		if err := unix.Statfs(f.Dir, &st); err != nil {
			return 0, 0, err
		}
		return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
	}
	var used int64
	err = filepath.WalkDir(f.Dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil // files vanish under Badger: not an error
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used += st.Blocks * 512
		}
		return nil
	})
	return max(0, f.Size-used), f.Size, err
}

// Free is Space's free bytes (localstream.Options.FreeSpace).
func (f *smallFS) Free(dir string) (int64, error) {
	free, _, err := f.Space(dir)
	return free, err
}

// Fill grows (or shrinks) the filler file so that free space is about
// want bytes, and returns the filler's size.
func (f *smallFS) Fill(t testing.TB, want int64) int64 {
	t.Helper()
	name := filepath.Join(f.Dir, "filler")
	cur := int64(0)
	if info, err := os.Stat(name); err == nil {
		cur = info.Size()
	}
	free, _, err := f.Space(f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	size := max(0, cur+free-want)
	file, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := file.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if size > cur { // allocate for real: a sparse file would take no space
		if err := unix.Fallocate(int(file.Fd()), 0, cur, size-cur); err != nil {
			buf := make([]byte, 1<<20)
			for off := cur; off < size; off += int64(len(buf)) {
				if _, err := file.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
					t.Fatalf("filler: %v", err)
				}
			}
		}
	}
	return size
}

// Unfill deletes the filler file.
func (f *smallFS) Unfill(t testing.TB) {
	t.Helper()
	if err := os.Remove(filepath.Join(f.Dir, "filler")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}
