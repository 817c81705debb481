package live

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestDroneSlotsReleasedWhenIdle (issue 37, case 10): the lane tracks at
// most max_drones drones per stream. Drones that stopped reporting give
// their slot to new ones once they have been silent for droneIdle (by
// the events' ingest times: the intakes' clock): a fleet that changes
// over the agent's life keeps its live view; a returning drone's value
// is sent again; a newcomer while every slot is live is refused,
// counted. On main no slot was ever released: once max_drones ids had
// been seen, every new drone was refused until a restart.
func TestDroneSlotsReleasedWhenIdle(t *testing.T) {
	ctx := context.Background()
	cfg := NewDefaultConfig()
	cfg.MaxDrones = 4
	s := newStation(t, stationOpts{})
	s.start(stationOpts{lane: true, live: cfg})
	base := time.Now().UnixNano()
	fly := func(prefix string, n int, ns int64) {
		for i := range n {
			s.appendNoted(ctx, "telemetry", telemetryEvent(fmt.Sprintf("%s%d", prefix, i), 0, ns))
		}
	}
	atCentre := func(what string, want map[string]int64) {
		t.Helper()
		if !testkit.Until(15*time.Second, func() bool {
			vals, err := Read(ctx, s.reader, ReadOptions{Agent: "a1"})
			if err != nil {
				return false
			}
			n := 0
			for _, v := range vals {
				if ns, ok := want[v.Drone]; ok && v.Stream == "telemetry" && v.EventTimeNs == ns {
					n++
				}
			}
			return n == len(want)
		}) {
			t.Fatalf("%s not in the live view: %+v", what, s.lane.Stats().Streams)
		}
	}
	fly("early", 4, base)
	atCentre("the first fleet", map[string]int64{"early0": base, "early1": base, "early2": base, "early3": base})

	later := base + int64(2*droneIdle) // the first fleet has been silent for twice droneIdle
	fly("late", 4, later)
	atCentre("a new fleet, after the first went silent", map[string]int64{"late0": later, "late1": later, "late2": later, "late3": later})

	fly("extra", 1, later+int64(time.Second)) // every slot is live: refused, counted
	testkit.WaitFor(t, 10*time.Second, "the newcomer refused", func() bool {
		for _, ss := range s.lane.Stats().Streams {
			if ss.Stream == "telemetry" {
				return ss.DronesRefused > 0
			}
		}
		return false
	})

	back := later + int64(2*droneIdle)
	s.appendNoted(ctx, "telemetry", telemetryEvent("early0", 1, back)) // it returns: its new value is sent
	atCentre("a returning drone", map[string]int64{"early0": back})
}

// TestLaneForgetsReleasedDrones: what the lane records of the drones it
// sent (version, time) holds only the drones the table holds. Before, it
// kept an entry for every drone id the agent ever saw (issue 37's shape:
// a per-drone record that never releases), growing with id churn.
func TestLaneForgetsReleasedDrones(t *testing.T) {
	f := newFollower(nil, StreamConfig{}, 4, 0, nil)
	sent, sentAt := map[string]uint64{}, map[string]time.Time{}
	now := time.Now()
	for round := range 50 {
		ns := now.Add(time.Duration(round) * 2 * droneIdle).UnixNano()
		for i := range 4 {
			f.put(value{drone: fmt.Sprintf("r%d-d%d", round, i), ingestNs: ns})
		}
		for _, sl := range f.pending(sent, sentAt) { // the lane sent them all
			sent[sl.v.drone], sentAt[sl.v.drone] = sl.version, now
		}
	}
	if len(sent) > 4 || len(sentAt) > 4 {
		t.Fatalf("the lane records %d drones (%d times) after 200 ids through 4 slots", len(sent), len(sentAt))
	}
	// A released drone that comes back is sent again.
	f.put(value{drone: "r0-d0", ingestNs: now.Add(200 * droneIdle).UnixNano()})
	if due := f.pending(sent, sentAt); len(due) != 1 || due[0].v.drone != "r0-d0" {
		t.Fatalf("a returning drone is not due: %+v", due)
	}
}
