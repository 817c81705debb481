package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/edge-agent/edge-agent/localstream"
)

func init() {
	commands["streams"] = command{
		summary: "print local streams: segments, head/tail and committed cuts",
		run:     runStreams,
	}
}

// streamReport is the JSON form of `edge-agent streams --json`.
type streamReport struct {
	Name      string                  `json:"name"`
	Segments  []localstream.Segment   `json:"segments"`
	Head      string                  `json:"head"`
	Tail      string                  `json:"tail"`
	Committed map[string]string       `json:"committed"`
	Stats     localstream.StreamStats `json:"stats"`
}

func runStreams(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("streams", stderr)
	dataDir := fs.String("data-dir", "", "the agent's data directory (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dataDir == "" {
		return usagef("--data-dir is required: the agent's data directory")
	}
	dir := filepath.Join(*dataDir, "store")
	if _, err := os.Stat(dir); err != nil {
		return usagef("--data-dir %s: no store found at %s", *dataDir, dir)
	}
	s, err := localstream.Open(dir, localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer s.Close()
	var reports []streamReport
	for _, st := range s.Streams() {
		topo := st.Topology()
		r := streamReport{Name: st.Name(), Head: st.HeadCut().String(), Tail: topo.TailCut().String(),
			Committed: map[string]string{}, Stats: st.Stats()}
		for _, id := range slices.Sorted(maps.Keys(topo.Segments)) {
			r.Segments = append(r.Segments, topo.Segments[id])
		}
		cuts, err := st.CommittedCuts()
		if err != nil {
			return err
		}
		for sink, c := range cuts {
			r.Committed[sink] = c.String()
		}
		reports = append(reports, r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	for _, r := range reports {
		fmt.Fprintf(stdout, "stream %s\n  head %s\n  tail %s\n", r.Name, r.Head, r.Tail)
		for sink, c := range r.Committed {
			fmt.Fprintf(stdout, "  committed[%s] %s\n", sink, c)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SEGMENT\tRANGE\tSTATE\tSTART\tLENGTH\tPREDECESSORS")
		for _, sg := range r.Segments {
			state := "open"
			if sg.Sealed {
				state = "sealed"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%v\n", sg.ID, sg.Range, state, sg.Start, sg.Length, sg.Predecessors)
		}
		tw.Flush()
	}
	return nil
}
