// Package e2e tests flight records end to end: a real agent flies the
// test drone into a real central server (internal/testkit/flyrig), and
// the records are exported, read by @mcap/core and ffprobe, verified and
// tampered with. The tests live apart from package flight so that the
// fuzz targets there are not instrumented with the whole agent and
// server (they ran at a few executions a minute with it).
package e2e
