package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/edge-agent/edge-agent/agent"
)

// showProgress prints one line a second until done: events stored and
// committed per stream, the committed watermark's lag, drones.
func showProgress(ctx context.Context, out io.Writer, a *agent.Agent, done <-chan struct{}) {
	start, last := time.Now(), time.Time{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			if time.Since(last) > 500*time.Millisecond {
				fmt.Fprintln(out, progressLine(a, time.Since(start)))
			}
			return
		case <-t.C:
			fmt.Fprintln(out, progressLine(a, time.Since(start)))
			last = time.Now()
		}
	}
}

func progressLine(a *agent.Agent, elapsed time.Duration) string {
	s := a.Status()
	var b strings.Builder
	fmt.Fprintf(&b, "%5.1fs ", elapsed.Seconds())
	for _, st := range s.Streams {
		committed, lag := uint64(0), "-"
		if r := st.Replication; r != nil {
			committed = st.Stats.Appended - min(st.Stats.Appended, r.BacklogEvents)
			if r.WatermarkLowerNs > 0 {
				lag = time.Since(time.Unix(0, r.WatermarkLowerNs)).Round(10 * time.Millisecond).String()
			}
		}
		fmt.Fprintf(&b, "| %s in %d committed %d wm-lag %s ", st.Name, st.Stats.Appended, committed, lag)
	}
	drones := 0
	if s.Video != nil {
		drones = s.Video.Drones
	}
	fmt.Fprintf(&b, "| video drones %d", drones)
	return b.String()
}
