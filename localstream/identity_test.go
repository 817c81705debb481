package localstream

import (
	"context"
	"errors"
	"os"
	"testing"
)

// TestStoreIdentity: a store keeps the identity made at its creation
// across reopening; a wiped directory makes a new one.
func TestStoreIdentity(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	id := s.ID()
	if len(id) != 16 {
		t.Fatalf("identity %q", id)
	}
	s.Close()
	s = openStore(t, dir, Options{})
	if s.ID() != id {
		t.Fatalf("reopened store has identity %s, made %s", s.ID(), id)
	}
	s.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, Options{})
	defer s.Close()
	if s.ID() == id {
		t.Fatal("a wiped directory kept the old identity")
	}
}

// TestRecoveredTailAndResetCut: RecoveredTail is the tail found at Open,
// not moved by later appends; ResetCommittedCut moves a sink's cut back,
// which SetCommittedCut refuses.
func TestRecoveredTailAndResetCut(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	st, err := s.CreateStream("t", StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := st.Append(context.Background(), Event{RoutingKey: "k", Writer: "w", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if !st.RecoveredTail().Equal(st.Topology().OpenAtZero()) {
		t.Fatalf("a new stream's recovered tail %s is not its start", st.RecoveredTail())
	}
	tail := st.TailCut()
	if err := st.SetCommittedCut("c", tail); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openStore(t, dir, Options{})
	defer s.Close()
	st, _ = s.Stream("t")
	if _, err := st.Append(context.Background(), Event{RoutingKey: "k", Writer: "w", Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if !st.RecoveredTail().Equal(tail) {
		t.Fatalf("recovered tail %s, want the tail at Open %s", st.RecoveredTail(), tail)
	}
	start := st.Topology().OpenAtZero()
	if err := st.SetCommittedCut("c", start); !errors.Is(err, ErrForeignCut) {
		t.Fatalf("SetCommittedCut back: %v, want refused", err)
	}
	if err := st.ResetCommittedCut("c", start); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := st.CommittedCut("c"); !c.Equal(start) {
		t.Fatalf("committed cut %s after reset, want %s", c, start)
	}
}
