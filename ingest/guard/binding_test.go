package guard

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

func TestBindingSpoofAndRebind(t *testing.T) {
	var b Binding[string]
	s := int64(time.Second)
	after := 5 * time.Second
	for _, c := range []struct {
		src  string
		at   int64
		may  bool
		want Verdict
	}{
		{"drone", 0, true, Taken},
		{"attacker", s, true, Spoofed},
		{"drone", 2 * s, true, Bound},
		{"attacker", 6 * s, true, Spoofed}, // the drone spoke 4 s ago
		{"attacker", 7 * s, false, Spoofed},
		{"attacker", 7 * s, true, Rebound}, // 5 s of silence
		{"drone", 8 * s, true, Spoofed},
	} {
		if got := b.Admit(c.src, c.at, after, c.may); got != c.want {
			t.Fatalf("%s at %v: %d, want %d", c.src, time.Duration(c.at), got, c.want)
		}
	}
	b.Release("drone") // not the bound one: nothing
	if b.Admit("drone", 9*s, after, true) != Spoofed {
		t.Fatal("released by a source it is not bound to")
	}
	b.Release("attacker")
	if b.Admit("drone", 9*s, after, true) != Rebound {
		t.Fatal("a released id not taken at once")
	}
	if b.Spoofed() != 5 || b.Rebinds() != 2 {
		t.Fatalf("spoofed %d rebinds %d", b.Spoofed(), b.Rebinds())
	}
}

// TestBindingModel runs random packets and releases against the binding
// and a plain list of what it admitted, from which the model derives the
// bound source and its silence.
func TestBindingModel(t *testing.T) {
	seed := testkit.Seed(t)
	for round := range testkit.Rounds(200) {
		r := rand.New(rand.NewPCG(seed, uint64(round)))
		runBindingModel(t, func() byte { return byte(r.Uint32()) }, 300)
	}
}

// FuzzBinding runs the model test with operations read from the input.
func FuzzBinding(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{0, 0, 0, 1, 200, 1, 3, 3, 3, 9, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		i := 0
		runBindingModel(t, func() byte {
			if i >= len(b) {
				return 0
			}
			i++
			return b[i-1]
		}, len(b)/3)
	})
}

// admitted is one packet the binding let through, or a release.
type admitted struct {
	src     byte
	at      int64
	release bool
}

func runBindingModel(t *testing.T, next func() byte, ops int) {
	t.Helper()
	after := time.Duration(next() % 16)
	var b Binding[byte]
	var log []admitted
	var spoofed, rebinds uint64
	now := int64(1)
	for op := range ops {
		src := next() % 4
		if next()%5 == 0 {
			now += int64(next() % 8)
		}
		if next()%7 == 0 {
			b.Release(src)
			log = append(log, admitted{src: src, release: true})
			continue
		}
		may := next()%6 != 0
		// The model: the bound source is that of the last packet let
		// through; its silence counts from its newest packet since; a
		// release of it after that frees the id.
		owner, bound, released, last := byte(0), false, false, int64(0)
		for _, a := range log {
			switch {
			case a.release && bound && a.src == owner:
				released = true
			case !a.release && (!bound || a.src != owner):
				owner, bound, released, last = a.src, true, false, a.at
			case !a.release:
				last, released = max(last, a.at), false
			}
		}
		var want Verdict
		switch {
		case !bound:
			want = Taken
		case owner == src: // released or not, its own packets are its own
			want = Bound
		case !may || !released && now-last < int64(after):
			want = Spoofed
		default:
			want = Rebound
		}
		got := b.Admit(src, now, after, may)
		if got != want {
			t.Fatalf("op %d: Admit(%d, %d, may %v) = %d, want %d (owner %d bound %v released %v last %d)", op, src, now, may, got, want, owner, bound, released, last)
		}
		switch got {
		case Spoofed:
			spoofed++
		case Rebound:
			rebinds++
		}
		if got != Spoofed {
			log = append(log, admitted{src: src, at: now})
		}
		if s, ok := b.Source(); ok != bound && got == Spoofed || ok && got != Spoofed && s != src {
			t.Fatalf("op %d: bound to %d (%v) after %d from %d", op, s, ok, got, src)
		}
	}
	if b.Spoofed() != spoofed || b.Rebinds() != rebinds {
		t.Fatalf("counted spoofed %d rebinds %d, verdicts %d %d", b.Spoofed(), b.Rebinds(), spoofed, rebinds)
	}
}
