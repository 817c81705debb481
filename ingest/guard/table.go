package guard

import (
	"iter"
	"time"
)

// TableConfig configures a Table.
type TableConfig[K comparable, V any] struct {
	// Max bounds the entries that count (those added with Add; pinned
	// ones do not). At least 1.
	Max int
	// Idle is the silence (no Get, Touch or Add of the entry) after which
	// an entry's slot may be given to a newcomer. 0: at once.
	Idle time.Duration
	// Busy, when set, reports an idle entry that must be kept anyway
	// (work in flight: appends not yet durable). It is called only for
	// idle entries, only when a slot is needed.
	Busy func(K, V) bool
	// Release, when set, is called with each entry whose slot is given
	// back (to close its writer), with the table's owner's lock held.
	Release func(K, V)
	// Active, when set, is an entry's own last activity (Unix ns), for
	// entries that track it under their own lock (Get and Touch then
	// need not write the table on every packet); math.MinInt64: the
	// source said goodbye (offline), its slot goes first.
	Active func(K, V) int64
}

// TableStats are a Table's counters.
type TableStats struct {
	// Added: entries added (Add and Pin); Released: idle entries whose
	// slot was given back; Refused: Adds turned away while every slot was
	// held by a live (or busy) entry.
	Added, Released, Refused uint64
}

// Table is a bounded table of per-source entries. When Max entries are
// held, Add gives the slot of the entry silent the longest (if it has
// been silent for Idle and is not Busy) to the newcomer, else refuses it,
// counted: a flood of new ids takes no slot a live source holds, and an
// id gone silent never keeps its slot for good.
//
// Finding a slot scans the entries (O(Max)) only when the table is full;
// a refused Add costs O(1) until the earliest entry can have gone idle.
// Not safe for concurrent use: the owner's lock guards it.
type Table[K comparable, V any] struct {
	cfg TableConfig[K, V]
	m   map[K]*tableEntry[V]
	// n counts the entries that count (not pinned).
	n int
	// quietUntil: no counted entry can be idle before this time (Unix
	// ns; 0: unknown). It saves the scan of a refused Add.
	quietUntil int64
	st         TableStats
}

type tableEntry[V any] struct {
	v      V
	last   int64 // the newest activity, Unix ns
	pinned bool
}

// NewTable returns an empty table of cfg.
func NewTable[K comparable, V any](cfg TableConfig[K, V]) *Table[K, V] {
	return &Table[K, V]{cfg: cfg, m: map[K]*tableEntry[V]{}}
}

// Get returns k's value and marks k active at now.
func (t *Table[K, V]) Get(k K, now int64) (V, bool) {
	e := t.m[k]
	if e == nil {
		var zero V
		return zero, false
	}
	e.last = max(e.last, now)
	return e.v, true
}

// Peek returns k's value without marking it active.
func (t *Table[K, V]) Peek(k K) (V, bool) {
	e := t.m[k]
	if e == nil {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Touch marks k active at now (a no-op for a key not held).
func (t *Table[K, V]) Touch(k K, now int64) {
	if e := t.m[k]; e != nil {
		e.last = max(e.last, now)
	}
}

// Add holds v for k (not held yet), active at now, taking a slot: a free
// one, else that of the entry silent the longest if it is idle and not
// busy (released). It reports false when every slot is held by a live
// entry: k is refused, counted.
func (t *Table[K, V]) Add(k K, v V, now int64) bool {
	if t.n >= t.cfg.Max && !t.releaseIdlest(now) {
		t.st.Refused++
		return false
	}
	t.n++
	t.put(k, v, now, false)
	return true
}

// Pin holds v for k (not held yet) outside the bound: it takes no slot
// and is never released (a configured source).
func (t *Table[K, V]) Pin(k K, v V, now int64) { t.put(k, v, now, true) }

func (t *Table[K, V]) put(k K, v V, now int64, pinned bool) {
	t.m[k] = &tableEntry[V]{v: v, last: now, pinned: pinned}
	t.st.Added++
	if q := now + int64(t.cfg.Idle); !pinned && q < t.quietUntil {
		t.quietUntil = q // a caller's clock may step back a little
	}
}

// Delete removes k (Release is not called: the caller closes it) and
// reports whether it was held.
func (t *Table[K, V]) Delete(k K) bool {
	e := t.m[k]
	if e == nil {
		return false
	}
	t.remove(k, e)
	return true
}

func (t *Table[K, V]) remove(k K, e *tableEntry[V]) {
	delete(t.m, k)
	if !e.pinned {
		t.n--
	}
}

// releaseIdlest releases the counted entry silent the longest among the
// idle, not busy ones, and reports whether there was one.
func (t *Table[K, V]) releaseIdlest(now int64) bool {
	if t.cfg.Active == nil && now < t.quietUntil {
		return false
	}
	idleBefore := now - int64(t.cfg.Idle)
	var (
		victim   K
		ve       *tableEntry[V]
		oldest   int64
		sawBusy  bool
		seenLive bool
	)
	var vlast int64
	for k, e := range t.m {
		if e.pinned {
			continue
		}
		last := t.last(k, e)
		if last > idleBefore {
			if !seenLive || last < oldest {
				oldest = last
			}
			seenLive = true
			continue
		}
		if t.cfg.Busy != nil && t.cfg.Busy(k, e.v) {
			sawBusy = true
			continue
		}
		if ve == nil || last < vlast {
			victim, ve, vlast = k, e, last
		}
	}
	if ve == nil {
		if !sawBusy && seenLive {
			t.quietUntil = oldest + int64(t.cfg.Idle)
		}
		return false
	}
	t.remove(victim, ve)
	t.st.Released++
	if t.cfg.Release != nil {
		t.cfg.Release(victim, ve.v)
	}
	return true
}

// last is e's last activity: its own (Active) or the table's.
func (t *Table[K, V]) last(k K, e *tableEntry[V]) int64 {
	if t.cfg.Active != nil {
		return t.cfg.Active(k, e.v)
	}
	return e.last
}

// Sweep releases every counted entry idle at now and not busy, and
// returns how many.
func (t *Table[K, V]) Sweep(now int64) int {
	idleBefore := now - int64(t.cfg.Idle)
	n := 0
	for k, e := range t.m {
		if e.pinned || t.last(k, e) > idleBefore || (t.cfg.Busy != nil && t.cfg.Busy(k, e.v)) {
			continue
		}
		t.remove(k, e)
		t.st.Released++
		n++
		if t.cfg.Release != nil {
			t.cfg.Release(k, e.v)
		}
	}
	return n
}

// Len is the number of entries held (pinned ones included).
func (t *Table[K, V]) Len() int { return len(t.m) }

// Counted is the number of entries that take a slot.
func (t *Table[K, V]) Counted() int { return t.n }

// All yields the entries, in no order. The table must not change while
// it runs.
func (t *Table[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for k, e := range t.m {
			if !yield(k, e.v) {
				return
			}
		}
	}
}

// Stats returns the counters.
func (t *Table[K, V]) Stats() TableStats { return t.st }
