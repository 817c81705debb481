package localstream

import "testing"

// BenchmarkCommitChecks is what the committer adds to every commit for a
// failing or full disk: the directory's stat (watchDir) and the memtable
// log's allocation (walSpace.ensure, a stat, a fallocate per MiB), for
// commits of 300 bytes.
//
//	go test -run '^$' -bench BenchmarkCommitChecks ./localstream/
func BenchmarkCommitChecks(b *testing.B) {
	s, err := Open(b.TempDir(), Options{MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if err := s.wal.ensure(300); err != nil {
			b.Fatal(err)
		}
		s.watchDir()
	}
}
