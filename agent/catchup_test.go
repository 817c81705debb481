package agent

import (
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/replicate"
)

// TestCatchUpEstimate: the ETA is the backlog over how fast it shrank in
// the last 10 s; a backlog sent within 2 s that does not shrink keeps up;
// a growing one has no ETA; an empty one is caught up. A stream that is
// not replicating has no ETA, empty or shrinking in the window before
// (issue 40 item 5).
func TestCatchUpEstimate(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name               string
		backlog0, backlog1 float64 // bytes 10 s ago, now
		sent0, sent1       float64
		events             uint64
		state              replicate.State
		eta                *float64
	}{
		{"draining", 3_000_000, 2_000_000, 0, 2_500_000, 100, replicate.StateReplicating, f(20)},     // 100 kB/s shrinking: 2 MB in 20 s
		{"keeping up", 50_000, 50_000, 0, 500_000, 10, replicate.StateReplicating, f(1)},             // 50 kB/s sent, 50 kB behind
		{"falling behind", 1_000_000, 2_000_000, 0, 1_000_000, 100, replicate.StateReplicating, nil}, // grows
		{"empty", 0, 0, 0, 1_000, 0, replicate.StateReplicating, f(0)},
		{"empty, retrying", 0, 0, 0, 0, 0, replicate.StateRetrying, nil},
		{"shrank before the cut, retrying", 3_000_000, 2_000_000, 0, 2_500_000, 100, replicate.StateRetrying, nil},
		{"empty, starting", 0, 0, 0, 0, 0, replicate.StateStarting, nil},
	} {
		a := &Agent{}
		for i := 0; i <= 10; i++ {
			x := float64(i) / 10
			b, s := c.backlog0+(c.backlog1-c.backlog0)*x, c.sent0+(c.sent1-c.sent0)*x
			a.history.add(now.Add(time.Duration(i-10)*time.Second), map[string]streamSample{"video": {backlogBytes: &b, replicatedBytes: &s}})
		}
		cu := a.catchUp(&replicate.StreamStats{Stream: "video", State: c.state, BacklogEvents: c.events, BacklogBytes: uint64(c.backlog1)}, now)
		switch {
		case c.eta == nil && cu.ETASeconds != nil:
			t.Errorf("%s: eta %v, want none", c.name, *cu.ETASeconds)
		case c.eta != nil && (cu.ETASeconds == nil || abs(*cu.ETASeconds-*c.eta) > 0.01):
			t.Errorf("%s: eta %v, want %v (send %.0f, drain %.0f)", c.name, cu.ETASeconds, *c.eta, cu.SendBytesPerSec, cu.DrainBytesPerSec)
		case c.eta != nil && !cu.CaughtUpAt.Equal(now.Add(time.Duration(*c.eta*float64(time.Second)))):
			t.Errorf("%s: caught up at %v", c.name, cu.CaughtUpAt)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
