//go:build race

package agent

// raceEnabled: built with -race, every step runs several times slower
// (timing bounds of the normal build do not hold).
const raceEnabled = true
