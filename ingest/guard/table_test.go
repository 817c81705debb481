package guard

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

func TestTableReleasesIdle(t *testing.T) {
	var released []string
	tb := NewTable(TableConfig[string, int]{Max: 2, Idle: time.Second, Release: func(k string, _ int) { released = append(released, k) }})
	s := int64(time.Second)
	if !tb.Add("a", 1, 0) || !tb.Add("b", 2, s/2) {
		t.Fatal("free slots refused")
	}
	if tb.Add("c", 3, s/2) {
		t.Fatal("a third entry taken while both are live")
	}
	tb.Touch("b", 2*s)
	if !tb.Add("c", 3, 2*s) || len(released) != 1 || released[0] != "a" {
		t.Fatalf("the idle entry not given back: released %v", released)
	}
	if _, ok := tb.Peek("a"); ok {
		t.Fatal("a released entry is still held")
	}
	if st := tb.Stats(); st.Added != 3 || st.Released != 1 || st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTableBusyAndPinnedAreKept(t *testing.T) {
	busy := map[string]bool{"a": true}
	tb := NewTable(TableConfig[string, int]{Max: 1, Idle: 0, Busy: func(k string, _ int) bool { return busy[k] }})
	tb.Pin("cfg", 0, 0)
	tb.Add("a", 1, 0)
	if tb.Add("b", 2, 10) {
		t.Fatal("a busy entry's slot given away")
	}
	busy["a"] = false
	if !tb.Add("b", 2, 10) {
		t.Fatal("an idle entry no longer busy kept its slot")
	}
	if tb.Sweep(1<<40) != 1 || tb.Len() != 1 {
		t.Fatalf("sweep: %d held, want the pinned one", tb.Len())
	}
}

// TestTableOwnActivity: entries that keep their own activity time are
// judged by it; one that said goodbye (math.MinInt64) goes first.
func TestTableOwnActivity(t *testing.T) {
	last := map[string]int64{"a": 100, "b": 100}
	tb := NewTable(TableConfig[string, int]{Max: 2, Idle: 50, Active: func(k string, _ int) int64 { return last[k] }})
	tb.Add("a", 1, 0)
	tb.Add("b", 2, 0)
	if tb.Add("c", 3, 120) {
		t.Fatal("a slot given while both entries are active by their own clock")
	}
	last["b"] = math.MinInt64
	if !tb.Add("c", 3, 120) {
		t.Fatal("the entry that said goodbye kept its slot")
	}
	if _, ok := tb.Peek("b"); ok {
		t.Fatal("the wrong entry released")
	}
}

// TestTableModel runs random operations against the table and a plain
// map that says what each must do.
func TestTableModel(t *testing.T) {
	seed := testkit.Seed(t)
	for round := range testkit.Rounds(200) {
		r := rand.New(rand.NewPCG(seed, uint64(round)))
		runTableModel(t, func() byte { return byte(r.Uint32()) }, 400)
	}
}

// FuzzTable runs the model test with operations read from the input.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 255, 255, 0, 9, 0, 17, 33})
	f.Fuzz(func(t *testing.T, b []byte) {
		i := 0
		runTableModel(t, func() byte {
			if i >= len(b) {
				return 0
			}
			i++
			return b[i-1]
		}, len(b)/2)
	})
}

type modelEntry struct {
	v      int
	last   int64
	pinned bool
}

func runTableModel(t *testing.T, next func() byte, ops int) {
	t.Helper()
	slots := 1 + int(next()%6)
	idle := int64(next() % 20)
	model := map[byte]*modelEntry{}
	busy := map[byte]bool{}
	var released []byte
	tb := NewTable(TableConfig[byte, int]{Max: slots, Idle: time.Duration(idle),
		Busy:    func(k byte, _ int) bool { return busy[k] },
		Release: func(k byte, _ int) { released = append(released, k) }})
	counted := func() int {
		n := 0
		for _, e := range model {
			if !e.pinned {
				n++
			}
		}
		return n
	}
	now := int64(100)
	for op := range ops {
		k := next() % 12
		switch c := next() % 9; c {
		case 0, 1: // time passes (at times a little back: clocks of several readers)
			now += int64(next()%8) - 1
		case 2, 3: // Add
			if model[k] != nil {
				continue
			}
			released = released[:0]
			var cands []byte
			var least int64
			for mk, e := range model {
				if e.pinned || now-e.last < idle || busy[mk] {
					continue
				}
				if len(cands) == 0 || e.last < least {
					cands, least = cands[:0], e.last
				}
				if e.last == least {
					cands = append(cands, mk)
				}
			}
			full := counted() >= slots
			ok := tb.Add(k, op, now)
			switch {
			case !full && (!ok || len(released) != 0):
				t.Fatalf("op %d: Add(%d) with a free slot: ok %v, released %v", op, k, ok, released)
			case full && len(cands) == 0 && ok:
				t.Fatalf("op %d: Add(%d) took a live entry's slot (released %v)", op, k, released)
			case full && len(cands) > 0 && (!ok || len(released) != 1 || !contains(cands, released[0])):
				t.Fatalf("op %d: Add(%d): ok %v released %v, want one of the idlest %v", op, k, ok, released, cands)
			}
			if len(released) == 1 {
				delete(model, released[0])
			}
			if ok {
				model[k] = &modelEntry{v: op, last: now}
			}
		case 4: // Pin
			if model[k] != nil {
				continue
			}
			tb.Pin(k, op, now)
			model[k] = &modelEntry{v: op, last: now, pinned: true}
		case 5: // Get
			v, ok := tb.Get(k, now)
			if e := model[k]; ok != (e != nil) || ok && v != e.v {
				t.Fatalf("op %d: Get(%d) = %d, %v; model %+v", op, k, v, ok, e)
			}
			if e := model[k]; e != nil {
				e.last = max(e.last, now)
			}
		case 6: // Delete
			if tb.Delete(k) != (model[k] != nil) {
				t.Fatalf("op %d: Delete(%d) disagrees with the model", op, k)
			}
			delete(model, k)
		case 7: // busy flips
			busy[k] = !busy[k]
		case 8: // Sweep, now and then
			if next()%4 != 0 {
				continue
			}
			released = released[:0]
			want := 0
			for mk, e := range model {
				if !e.pinned && now-e.last >= idle && !busy[mk] {
					want++
					delete(model, mk)
				}
			}
			if n := tb.Sweep(now); n != want || len(released) != want {
				t.Fatalf("op %d: Sweep released %d (%v), want %d", op, n, released, want)
			}
		}
		if tb.Len() != len(model) || tb.Counted() != counted() || tb.Counted() > slots {
			t.Fatalf("op %d: table holds %d (%d counted), model %d (%d), max %d", op, tb.Len(), tb.Counted(), len(model), counted(), slots)
		}
	}
	for k, v := range tb.All() {
		if e := model[k]; e == nil || e.v != v {
			t.Fatalf("entry %d=%d not in the model", k, v)
		}
	}
}

func contains(s []byte, b byte) bool {
	for _, x := range s {
		if x == b {
			return true
		}
	}
	return false
}

// A flood of new ids into a full table of live entries costs O(1) each
// (no scan) until one can have gone idle.
func BenchmarkTableRefusedFlood(b *testing.B) {
	tb := NewTable(TableConfig[int, int]{Max: 1024, Idle: time.Minute})
	for i := range 1024 {
		tb.Add(i, i, 0)
	}
	for i := 0; b.Loop(); i++ {
		tb.Add(2000+i, 0, int64(i))
	}
}
