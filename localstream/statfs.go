package localstream

import "golang.org/x/sys/unix"

// statfsFree returns the bytes available to unprivileged users on the
// filesystem holding dir.
func statfsFree(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	// Bavail and Bsize differ in type across architectures (int32 Bsize
	// on 32-bit ARM): convert both.
	return int64(st.Bavail) * int64(st.Bsize), nil
}
