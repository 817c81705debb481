// Package testkit holds what the packages' tests share: waiting on a
// condition (WaitFor, or Until and UntilEvery for a test that reports what
// it saw; Settle until a count holds still; UDPQueue, a UDP socket's queue
// and drops), a component's Run until a bounded stop (Run), a log sink safe for concurrent writes (SyncBuffer), the
// random seed and rounds a run takes from EDGE_SEED and EDGE_ROUNDS (Seed,
// Rounds), a TCP link the test breaks (Proxy), a tmpfs to fill
// (MountTmpfs), a server that never answers (SilentServer), and the
// re-exec harness of the crash tests (Main,
// ChildCommand, KilledBySIGKILL): the test binary runs again as a child
// process in a named role, to be killed with SIGKILL. A test file keeps
// only what is its own.
//
// It imports no package of the project, so every package's tests may use
// it, localstream's and central's included; the rigs that open a store or
// start a JetStream server are in the sub-package rigs.
//
// It is imported by tests only.
package testkit
