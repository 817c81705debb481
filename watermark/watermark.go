package watermark

import (
	"fmt"

	"github.com/edge-agent/edge-agent/localstream"
)

// Watermark is the triple (lower, upper, cut) of a stream: every event
// after Cut that is not flagged late has an event time of at least LowerNs;
// UpperNs is the highest time noted by the writers that contributed. The
// zero value means "no watermark yet" (no writer has noted time).
//
// A Watermark is a value; its Cut's map must not be modified once shared.
type Watermark struct {
	// LowerNs is the lower time bound, Unix ns: the min over counted writers.
	LowerNs int64 `json:"lower_ns"`
	// UpperNs is the upper time bound, Unix ns: the max over counted writers.
	UpperNs int64 `json:"upper_ns"`
	// Cut is the least upper bound of the contributing writers' positions,
	// filled to cover the whole key space. The commit record's JSON form
	// of it is a map (localstream.CutMap); the struct's own JSON uses the cut's text form.
	Cut localstream.StreamCut `json:"cut"`
}

// IsZero reports whether w is the zero value (no watermark yet).
func (w Watermark) IsZero() bool {
	return w.LowerNs == 0 && w.UpperNs == 0 && w.Cut.IsZero()
}

// Equal reports whether two watermarks are identical.
func (w Watermark) Equal(o Watermark) bool {
	return w.LowerNs == o.LowerNs && w.UpperNs == o.UpperNs && w.Cut.Equal(o.Cut)
}

// String renders "lower=<ns> upper=<ns> cut=<text form>".
func (w Watermark) String() string {
	if w.IsZero() {
		return "none"
	}
	return fmt.Sprintf("lower=%d upper=%d cut=%s", w.LowerNs, w.UpperNs, w.Cut)
}
