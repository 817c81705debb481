package localstream

import (
	"testing"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestMain runs the tests, or, as a child process of a crash or tmpfs
// test (testkit.ChildCommand), that test's child role.
func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{
		"crash":     crashChild,     // TestSIGKILLDuringAppends
		"tmpfs":     tmpfsChild,     // TestFullTmpfs
		"churn":     churnChild,     // TestTmpfsChurn
		"bigdelete": bigDeleteChild, // TestBigDeletionOnFullTmpfs
	})
}
