// Package procs sizes the Go scheduler to the agent's load.
//
// With more Ps (GOMAXPROCS) than its Go code keeps busy, the runtime pays
// for the idle ones: every goroutine made runnable while a P is idle wakes
// an OS thread to spin for work (a futex wake, a context switch, then the
// thread parks again), and a P left behind by a thread blocked in a system
// call (Badger's msync of its WAL, a socket read) is handed to another
// thread. A ground station's agent moves events from goroutine to
// goroutine (connection, drone lane, committer, completer, replicator)
// hundreds of thousands of times a second at well under one core of Go
// code, so on a small box those wake-ups are a large share of its CPU
// (BENCHMARKS.md, "Sizing the scheduler to the load": a seventh of the
// agent's CPU per event at one drone on 2 cores).
//
// A Controller therefore keeps GOMAXPROCS at the fewest Ps the load needs
// and gives the agent every CPU when it needs them. Each Interval it
// reads the process's CPU time, user and system (getrusage): only a
// thread holding a P runs Go code, and a goroutine in a short system call
// (a socket read or write, a pwrite) keeps its P for the call, so CPU
// time over the interval divided by the Ps is how busy the Ps were. (User
// time alone left a load of short system calls at one P, busy 0.00, at
// 0.68× the messages of fixed GOMAXPROCS=2: issue 29, BENCHMARKS.md.) A busy share at or above Raise in one interval raises
// the Ps at once, to the fewest that would have been busy at most Target
// (at least one more, at most Max); when every interval of the last Hold
// would have fitted in fewer Ps at Target, it lowers them to that. A
// system call that blocks (an msync waiting for the disk) does not keep
// its P (the runtime hands it on) and waits off the CPU, so blocking I/O
// and syncs run in parallel whatever the count and hardly count as load.
//
// How long runnable goroutines waited to run (the runtime's
// /sched/latencies histogram) is shown in Stats but does not raise the
// count: on a box whose CPUs other processes keep busy the waits are for
// the CPU, as long with more Ps (measured: 2–15 ms at the 99th percentile
// with two Ps beside the harness's publisher), and acting on them only
// bought the wake-ups back.
//
// What it costs: the goroutines of a process on one P take turns, so a
// drone's PUBACK can wait behind other work for a few milliseconds more at
// the tail (BENCHMARKS.md has the measured percentiles); `runtime.procs`
// fixes the count where that matters more than CPU.
package procs
