package guard

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestAdmissionModel runs random arrivals, requests, reads and closes
// against the limiter's core and a plain list of connections in accept
// order that says who must be evicted or refused.
func TestAdmissionModel(t *testing.T) {
	seed := testkit.Seed(t)
	for round := range testkit.Rounds(200) {
		r := rand.New(rand.NewPCG(seed, uint64(round)))
		runAdmissionModel(t, func() byte { return byte(r.Uint32()) }, 300)
	}
}

// FuzzAdmission runs the model test with operations read from the input.
func FuzzAdmission(f *testing.F) {
	f.Add([]byte{3, 1, 2, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 1, 1, 0, 9, 9, 9, 9, 4, 4, 4, 4, 7, 7, 2, 2, 1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		i := 0
		runAdmissionModel(t, func() byte {
			if i >= len(b) {
				return 0
			}
			i++
			return b[i-1]
		}, len(b)/3)
	})
}

func runAdmissionModel(t *testing.T, next func() byte, ops int) {
	t.Helper()
	cfg := LimiterConfig{Max: 1 + int(next()%6), MaxPerSource: 1 + int(next()%6), MaxIdle: 1 + int(next()%6),
		EvictAfter: time.Duration(next() % 10), ReadsAreActivity: next()%2 == 0}
	a := newAdmission(&cfg)
	var open []*Conn // the model: open connections in accept order
	now := int64(50)
	quiet := func(c *Conn) int64 {
		if cfg.ReadsAreActivity {
			return max(c.quietSince, c.lastRead.Load())
		}
		return c.quietSince
	}
	oldest := func(before int64) []*Conn { // the idle quiet since before, the longest first (ties)
		var out []*Conn
		for _, c := range open {
			if c.active > 0 || quiet(c) > before {
				continue
			}
			if len(out) == 0 || quiet(c) < quiet(out[0]) {
				out = out[:0]
			}
			if len(out) == 0 || quiet(c) == quiet(out[0]) {
				out = append(out, c)
			}
		}
		return out
	}
	drop := func(v *Conn) {
		for i, c := range open {
			if c == v {
				open = append(open[:i], open[i+1:]...)
				return
			}
		}
		t.Fatalf("evicted a connection that is not open")
	}
	for op := range ops {
		switch next() % 8 {
		case 0, 1: // a newcomer
			c := &Conn{src: string('a' + rune(next()%3))}
			perSrc, idle := counts(open, c.src)
			var want Refusal
			var cands []*Conn
			if len(open) >= cfg.Max {
				if cands = oldest(now - int64(cfg.EvictAfter)); len(cands) == 0 {
					want = RefusedFull
				}
			}
			// Its own idle connection may make room for it (when there is
			// one among the candidates, the core picks it or another).
			if want == Admitted && perSrc >= cfg.MaxPerSource {
				own := false
				for _, v := range cands {
					own = own || v.src == c.src
				}
				if !own || perSrc > cfg.MaxPerSource {
					want = RefusedSource
				}
			}
			if want == Admitted && len(cands) == 0 && idle >= cfg.MaxIdle {
				cands = oldest(now)
			}
			victim, r, _ := a.admit(c, now)
			if wantVictim := want == Admitted && len(cands) > 0; r != want || (victim != nil) != wantVictim {
				t.Fatalf("op %d: admit from %s: %d victim %v; want %d of %d candidates (open %d, idle %d, per source %d, %+v)",
					op, c.src, r, victim != nil, want, len(cands), len(open), idle, perSrc, cfg)
			}
			if victim != nil {
				if !containsConn(cands, victim) {
					t.Fatalf("op %d: evicted one not among the longest quiet", op)
				}
				drop(victim)
			}
			if r == Admitted {
				open = append(open, c)
			}
		case 2: // a request starts or a session connects
			if len(open) > 0 {
				a.activate(open[int(next())%len(open)])
			}
		case 3: // one ends
			if len(open) > 0 {
				a.deactivate(open[int(next())%len(open)], now)
			}
		case 4: // bytes read
			if len(open) > 0 {
				open[int(next())%len(open)].lastRead.Store(now)
			}
		case 5: // a close
			if len(open) > 0 {
				c := open[int(next())%len(open)]
				a.remove(c)
				a.remove(c) // twice: a no-op
				drop(c)
			}
		case 6:
			now += int64(next() % 6)
		case 7: // WaitForRoom: a slot reserved before the accept, then the newcomer
			cands := oldest(now - int64(cfg.EvictAfter))
			full := len(open) >= cfg.Max
			victim, ok := a.reserve(now)
			if ok != (!full || len(cands) > 0) || (victim != nil) != (full && ok) || victim != nil && !containsConn(cands, victim) {
				t.Fatalf("op %d: reserve with %d open: ok %v, victim %v, %d candidates", op, len(open), ok, victim != nil, len(cands))
			}
			if victim != nil {
				drop(victim)
			}
			if !ok {
				continue
			}
			if next()%8 == 0 { // the accept failed
				a.unreserve()
				continue
			}
			c := &Conn{src: string('a' + rune(next()%3))}
			perSrc, idle := counts(open, c.src)
			var idleCands []*Conn
			if perSrc < cfg.MaxPerSource && idle >= cfg.MaxIdle {
				idleCands = oldest(now)
			}
			victim, r := a.admitReserved(c, now)
			if (r == RefusedSource) != (perSrc >= cfg.MaxPerSource) || r == RefusedFull || (victim != nil) != (len(idleCands) > 0) ||
				victim != nil && !containsConn(idleCands, victim) {
				t.Fatalf("op %d: admitReserved from %s: %d victim %v (per source %d, idle %d)", op, c.src, r, victim != nil, perSrc, idle)
			}
			if victim != nil {
				drop(victim)
			}
			if r == Admitted {
				open = append(open, c)
			}
		}
		if a.reserved != 0 {
			t.Fatalf("op %d: %d reservations left", op, a.reserved)
		}
		_, idle := counts(open, "")
		if len(a.open) != len(open) || a.idle != idle || len(open) > cfg.Max {
			t.Fatalf("op %d: core holds %d (%d idle), model %d (%d idle), max %d", op, len(a.open), a.idle, len(open), idle, cfg.Max)
		}
	}
}

// counts returns how many of open are from src, and how many are idle.
func counts(open []*Conn, src string) (fromSrc, idle int) {
	for _, o := range open {
		if o.src == src {
			fromSrc++
		}
		if o.active == 0 {
			idle++
		}
	}
	return fromSrc, idle
}

func containsConn(s []*Conn, c *Conn) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}
