package testkit

import "testing"

// EDGE_SEED and EDGE_ROUNDS override; without them a seed is drawn and
// the default number of rounds is kept.
func TestSeedAndRounds(t *testing.T) {
	t.Setenv("EDGE_SEED", "")
	t.Setenv("EDGE_ROUNDS", "")
	if Seed(t) == 0 || Rounds(4) != 4 {
		t.Fatal("no seed drawn, or the default rounds not kept")
	}
	t.Setenv("EDGE_SEED", "42")
	t.Setenv("EDGE_ROUNDS", "7")
	if Seed(t) != 42 || Rounds(4) != 7 {
		t.Fatal("EDGE_SEED or EDGE_ROUNDS not taken")
	}
	t.Setenv("EDGE_ROUNDS", "-1")
	if Rounds(4) != 4 {
		t.Fatal("a negative EDGE_ROUNDS taken")
	}
}
