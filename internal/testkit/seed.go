package testkit

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Seed is the test's random seed: EDGE_SEED when set (a value that is
// not a number fails t), else the clock. It is logged with how to run the
// test again with it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EDGE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EDGE_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed=%d (rerun with EDGE_SEED=%d)", seed, seed)
	return seed
}

// Rounds is EDGE_ROUNDS when it is a positive number, else def: how many
// rounds a randomized or fault test runs.
func Rounds(def int) int {
	if v, err := strconv.Atoi(os.Getenv("EDGE_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return def
}
