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
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

func init() {
	commands["streams"] = command{
		summary: "print local streams: segments, head/tail and committed cuts, backlog, watermark (agent stopped)",
		run:     runStreams,
	}
}

// streamReport is the JSON form of `edge-agent streams --json`.
type streamReport struct {
	Name      string                `json:"name"`
	Segments  []localstream.Segment `json:"segments"`
	Head      string                `json:"head"`
	Tail      string                `json:"tail"`
	Committed map[string]string     `json:"committed"`
	// Backlog is, per sink, the events (and estimated bytes) after its committed cut.
	Backlog map[string]backlog `json:"backlog"`
	// Watermark is the local watermark from the persisted writer marks.
	Watermark watermark.Watermark     `json:"watermark"`
	Stats     localstream.StreamStats `json:"stats"`
}

type backlog struct {
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
}

func runStreams(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("streams", stderr)
	dataDir := fs.String("data-dir", "", "the agent's data directory (or --config)")
	config := fs.String("config", "", "the agent's config file: its data_dir, with the EDGE_AGENT_* environment as run reads it")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dataDir == "" && *config != "" {
		cfg, err := fileAndEnvConfig(*config)
		if err != nil {
			return err
		}
		*dataDir = cfg.DataDir
	}
	if *dataDir == "" {
		return usagef("--data-dir or --config is required: the agent's data directory, or the config file that names it")
	}
	if fi, err := os.Stat(*dataDir); err == nil && !fi.IsDir() {
		return usagef("--data-dir %s: a file, not a directory: give the agent's data directory (its data_dir)", *dataDir)
	}
	dir := filepath.Join(*dataDir, "store")
	if _, err := os.Stat(dir); err != nil {
		return usagef("--data-dir %s: no store/ in it: give the agent's data directory (its data_dir)", *dataDir)
	}
	s, err := localstream.Open(dir, localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("%w (is the agent running? then ask it: GET /status)", err)
	}
	defer s.Close()
	var reports []streamReport
	for _, st := range s.Streams() {
		topo := st.Topology()
		r := streamReport{Name: st.Name(), Head: st.HeadCut().String(), Tail: topo.TailCut().String(),
			Committed: map[string]string{}, Backlog: map[string]backlog{}, Stats: st.Stats()}
		if tr, err := watermark.NewTracker(st, s, watermark.Options{Logger: slog.New(slog.DiscardHandler)}); err == nil {
			r.Watermark, _ = tr.Local()
		}
		for _, id := range slices.Sorted(maps.Keys(topo.Segments)) {
			r.Segments = append(r.Segments, topo.Segments[id])
		}
		cuts, err := st.CommittedCuts()
		if err != nil {
			return err
		}
		for sink, c := range cuts {
			r.Committed[sink] = c.String()
			ev, by := replicate.Backlog(topo, c)
			r.Backlog[sink] = backlog{ev, by}
		}
		reports = append(reports, r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	for _, r := range reports {
		fmt.Fprintf(stdout, "stream %s\n  head %s\n  tail %s\n  watermark %s\n", r.Name, r.Head, r.Tail, r.Watermark)
		for sink, c := range r.Committed {
			fmt.Fprintf(stdout, "  committed[%s] %s  backlog %d events, ~%d bytes\n", sink, c, r.Backlog[sink].Events, r.Backlog[sink].Bytes)
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
