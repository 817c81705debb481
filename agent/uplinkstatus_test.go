package agent

import (
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/replicate"
)

// TestUplinkEstimate: the uplink's "complete in" is the whole backlog
// over how fast it shrinks — at the rate sent now while up, at the cap
// less what capture adds while down — and there is none while capture
// outpaces the link (issue 40 item 5). Before, it was the backlog over
// the send rate or the cap alone: with video captured at 230 kB/s over a
// 50 kB/s cap, the page said "complete in 97 s at the current rate"
// (then 153 s, 61 s, …) while the backlog grew and the video row said
// "not catching up".
func TestUplinkEstimate(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name               string
		down               bool
		backlog0, backlog1 float64 // payload bytes waiting 10 s ago, now
		sent0, sent1       float64 // payload bytes committed
		wire               float64 // bytes a second on the wire
		eta                *float64
		basis              string
	}{
		{"up, draining", false, 3_000_000, 2_000_000, 0, 2_500_000, 250_000, f(20), "current rate"}, // shrinks 100 kB/s
		{"up, keeping up", false, 50_000, 50_000, 0, 500_000, 50_000, f(1), "current rate"},
		{"up, capture outpaces the link", false, 1_000_000, 2_000_000, 0, 1_000_000, 100_000, nil, ""},
		{"down, capture under the cap", true, 1_000_000, 1_100_000, 0, 0, 0, f(1_100_000.0 / 40_000), "cap"}, // 50 kB/s cap, 10 kB/s captured
		{"down, capture over the cap", true, 1_000_000, 2_000_000, 0, 0, 0, nil, ""},
	} {
		a := &Agent{uplink: replicate.NewUplink(50_000)}
		for i := 0; i <= 10; i++ {
			x := float64(i) / 10
			b, s := c.backlog0+(c.backlog1-c.backlog0)*x, c.sent0+(c.sent1-c.sent0)*x
			at := now.Add(time.Duration(i-10) * time.Second)
			a.history.add(at, map[string]streamSample{"video": {backlogBytes: &b, replicatedBytes: &s}})
			a.wire.add(at, int64(c.wire*float64(i)))
		}
		o := replicate.OutageState{Down: c.down, Since: now.Add(-time.Hour)}
		repl := map[string]*replicate.StreamStats{"video": {Stream: "video", State: replicate.StateReplicating,
			BacklogEvents: 1, BacklogBytes: uint64(c.backlog1), WireRatio: 1}}
		if c.down {
			repl["video"].State = replicate.StateRetrying
		}
		u := a.uplinkStatus(now, o, repl)
		switch {
		case c.eta == nil && u.ETASeconds != nil:
			t.Errorf("%s: complete in %.1f s at the %s, want not catching up", c.name, *u.ETASeconds, u.ETABasis)
		case c.eta == nil && !u.CompleteAt.IsZero():
			t.Errorf("%s: complete at %v, want none", c.name, u.CompleteAt)
		case c.eta != nil && u.ETASeconds == nil:
			t.Errorf("%s: not catching up, want complete in %.1f s at the %s", c.name, *c.eta, c.basis)
		case c.eta != nil && (abs(*u.ETASeconds-*c.eta) > 0.1 || u.ETABasis != c.basis):
			t.Errorf("%s: complete in %.1f s at the %s, want %.1f s at the %s", c.name, *u.ETASeconds, u.ETABasis, *c.eta, c.basis)
		}
	}
}
