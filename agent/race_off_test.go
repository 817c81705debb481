//go:build !race

package agent

// raceEnabled: built with -race (see race_on_test.go).
const raceEnabled = false
