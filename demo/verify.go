package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	stdsync "sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// Report is the demo's verification.
type Report struct {
	// Streams has one entry per local stream.
	Streams []StreamReport
	// TelemetryPublished is what the simulator had acked by the broker.
	TelemetryPublished uint64
	// TelemetryMissing and TelemetryDuplicated count simulator messages
	// (drone, seq) absent from or repeated at the centre.
	TelemetryMissing, TelemetryDuplicated uint64
	// VideoPacketsSent is what the replay sent.
	VideoPacketsSent int
	// MAVLinkSent is the frames the MAVLink simulator sent; MAVLinkCentral
	// the MAVLink events at the centre; MAVLinkMissing, MAVLinkDuplicated
	// and MAVLinkOutOfOrder compare them frame by frame, byte for byte,
	// per drone.
	MAVLinkSent, MAVLinkCentral                          int
	MAVLinkMissing, MAVLinkDuplicated, MAVLinkOutOfOrder int
	// Clip is the exported clip; ClipChunks its chunks; ClipFrames the
	// frames ffprobe decoded (-1 when ffprobe is absent); ClipError what
	// ffprobe complained about.
	Clip       string
	ClipChunks int
	ClipFrames int
	ClipError  string
	// TimeCut is the latest T up to which everything is at the centre
	// across all streams (a centralread.CutAt, checked with TimeCut.Verify);
	// zero when some stream has no committed watermark.
	TimeCut time.Time
	// Problems lists every failed check.
	Problems []string
}

// StreamReport verifies one stream.
type StreamReport struct {
	Name string
	// Local is the events in the local stream; Central those at the centre.
	Local, Central int
	// Duplicates are local positions seen more than once at the centre;
	// Missing local events absent there; OutOfOrder routing keys whose
	// central order differs from the local order.
	Duplicates, Missing, OutOfOrder int
	// Commits is the number of commit records; WatermarkViolations events
	// earlier than a watermark committed before them (late events excepted).
	Commits, WatermarkViolations int
	// FinalWatermark is the last commit record's watermark lower bound.
	FinalWatermark time.Time
	// Drones is the number of routing keys.
	Drones int
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Print writes the report.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintln(w, "\nverification (read back from the central store):")
	for _, s := range r.Streams {
		wm := "none"
		if !s.FinalWatermark.IsZero() {
			wm = s.FinalWatermark.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(w, "  %-9s local %6d  central %6d  duplicates %d  missing %d  out-of-order keys %d  drones %d  commits %d  watermark violations %d  final watermark %s\n",
			s.Name, s.Local, s.Central, s.Duplicates, s.Missing, s.OutOfOrder, s.Drones, s.Commits, s.WatermarkViolations, wm)
	}
	fmt.Fprintf(w, "  telemetry: simulator published %d, missing at the centre %d, duplicated %d\n",
		r.TelemetryPublished, r.TelemetryMissing, r.TelemetryDuplicated)
	if r.MAVLinkSent > 0 {
		fmt.Fprintf(w, "  mavlink: simulator sent %d frames, at the centre %d (byte for byte: missing %d, duplicated %d, drones out of order %d)\n",
			r.MAVLinkSent, r.MAVLinkCentral, r.MAVLinkMissing, r.MAVLinkDuplicated, r.MAVLinkOutOfOrder)
	}
	frames := "ffprobe not installed"
	if r.ClipFrames >= 0 {
		frames = fmt.Sprintf("ffprobe decoded %d frames", r.ClipFrames)
	}
	fmt.Fprintf(w, "  video: replay sent %d packets; clip %s: %d chunks, %s\n", r.VideoPacketsSent, r.Clip, r.ClipChunks, frames)
	if !r.TimeCut.IsZero() {
		fmt.Fprintf(w, "  time cut: everything up to %s is at the centre across all streams (edge-agent cut --at; verified)\n",
			r.TimeCut.UTC().Format(time.RFC3339Nano))
	}
	if r.OK() {
		fmt.Fprintln(w, "RESULT: OK — every local event is at the centre exactly once, in per-drone order, under its watermarks")
		return
	}
	fmt.Fprintln(w, "RESULT: FAILED")
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  -", p)
	}
}

// verify compares the local store of the stopped agent with the centre.
func verify(ctx context.Context, o Options, agentID, agentDir, centralURL string, sim mqttsim.Result, sent []replay.Summary, mav *mavlinkSent) (*Report, error) {
	rep := &Report{TelemetryPublished: sim.Published, ClipFrames: -1}
	for _, s := range sent {
		rep.VideoPacketsSent += s.Packets
	}
	store, err := localstream.Open(filepath.Join(agentDir, "store"), localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("demo: reopen local store: %w", err)
	}
	defer store.Close()
	nc, err := nats.Connect(centralURL, nats.Name("edge-agent demo verify"))
	if err != nil {
		return nil, fmt.Errorf("demo: connect to central: %w", err)
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	all := map[string][]centralread.Item{}
	for _, st := range store.Streams() {
		local, err := st.ReadAll()
		if err != nil {
			return rep, fmt.Errorf("demo: read local %s: %w", st.Name(), err)
		}
		items, err := centralread.ReadAll(rctx, nc, st.Name(), centralread.ReadOptions{Agent: agentID})
		if err != nil {
			return rep, fmt.Errorf("demo: read central %s: %w", st.Name(), err)
		}
		all[st.Name()] = items
		sr := checkStream(st.Name(), local, items)
		rep.Streams = append(rep.Streams, sr)
		if sr.Local != sr.Central || sr.Duplicates+sr.Missing+sr.OutOfOrder+sr.WatermarkViolations > 0 {
			rep.problem("stream %s: local %d central %d duplicates %d missing %d out-of-order %d watermark violations %d",
				sr.Name, sr.Local, sr.Central, sr.Duplicates, sr.Missing, sr.OutOfOrder, sr.WatermarkViolations)
		}
		if st.Name() == "telemetry" {
			checkTelemetry(rep, sim, items)
			checkMAVLink(rep, mav, items)
		}
	}
	checkTimeCut(rctx, rep, nc, store, agentID, all)
	if o.VideoDrones > 0 {
		exportClip(rctx, rep, o, nc, agentID)
	}
	return rep, nil
}

// checkTimeCut takes T just before the lowest final watermark of the
// streams — the latest time up to which everything is at the centre —
// and checks that the time cut there is complete and keeps its promise.
func checkTimeCut(ctx context.Context, rep *Report, nc *nats.Conn, store *localstream.Store, agentID string, items map[string][]centralread.Item) {
	var names []string
	var at time.Time
	for _, s := range rep.Streams {
		if s.FinalWatermark.IsZero() {
			return
		}
		names = append(names, s.Name)
		if at.IsZero() || s.FinalWatermark.Before(at) {
			at = s.FinalWatermark
		}
	}
	if len(names) == 0 {
		return
	}
	at = at.Add(-time.Nanosecond)
	c, err := centralread.CutAt(ctx, nc, at.UnixNano(), centralread.TimeCutOptions{Agent: agentID, Streams: names})
	if err == nil && !c.Complete {
		err = fmt.Errorf("not complete: %+v", c.Streams)
	}
	if err == nil {
		err = c.Verify(items, func(_, stream string, cut localstream.StreamCut, p localstream.Position) (bool, error) {
			st, err := store.Stream(stream)
			if err != nil {
				return false, err
			}
			return st.Topology().Contains(cut, p)
		})
	}
	if err != nil {
		rep.problem("time cut at %s: %v", at.UTC().Format(time.RFC3339Nano), err)
		return
	}
	rep.TimeCut = at
}

func checkStream(name string, local []localstream.Record, items []centralread.Item) StreamReport {
	sr := StreamReport{Name: name, Local: len(local)}
	localByKey := map[string][]localstream.Position{}
	for _, r := range local {
		localByKey[r.RoutingKey] = append(localByKey[r.RoutingKey], r.Position)
	}
	sr.Drones = len(localByKey)
	centralByKey := map[string][]localstream.Position{}
	seen := map[localstream.Position]int{}
	for _, it := range items {
		switch it.Kind {
		case centralread.ItemCommit:
			sr.Commits++
			if it.Commit.Watermark.LowerNs > 0 {
				sr.FinalWatermark = time.Unix(0, it.Commit.Watermark.LowerNs)
			}
		case centralread.ItemEvent:
			r := it.Event.Record
			sr.Central++
			seen[r.Position]++
			if seen[r.Position] == 2 {
				sr.Duplicates++
			}
			centralByKey[r.RoutingKey] = append(centralByKey[r.RoutingKey], r.Position)
			if r.EventTime > 0 && !r.Flags.Has(localstream.FlagLate) && r.EventTime < it.Watermark.LowerNs {
				sr.WatermarkViolations++
			}
		}
	}
	for _, r := range local {
		if seen[r.Position] == 0 {
			sr.Missing++
		}
	}
	for key, pos := range localByKey {
		if !slices.Equal(pos, centralByKey[key]) {
			sr.OutOfOrder++
		}
	}
	return sr
}

// checkTelemetry checks each simulated message (drone, seq) arrived exactly once, in order.
func checkTelemetry(rep *Report, sim mqttsim.Result, items []centralread.Item) {
	got := map[string][]uint64{}
	for _, it := range items {
		if it.Kind != centralread.ItemEvent || it.Event.Record.Flags.Has(localstream.FlagGap) {
			continue
		}
		var m mqttsim.Telemetry
		if json.Unmarshal(it.Event.Record.Payload, &m) != nil || m.Drone == "" {
			continue // status messages and other payloads
		}
		got[m.Drone] = append(got[m.Drone], m.Seq)
	}
	for _, drone := range slices.Sorted(maps.Keys(sim.Drones)) {
		d := sim.Drones[drone]
		seqs := got[drone]
		count := map[uint64]int{}
		for _, s := range seqs {
			count[s]++
		}
		for s := d.FirstSeq; d.Published > 0 && s <= d.LastSeq; s++ {
			switch count[s] {
			case 0:
				rep.TelemetryMissing++
			case 1:
			default:
				rep.TelemetryDuplicated += uint64(count[s] - 1)
			}
		}
		if !slices.IsSorted(seqs) {
			rep.problem("telemetry of %s out of order at the centre", drone)
		}
	}
	if rep.TelemetryMissing+rep.TelemetryDuplicated > 0 {
		rep.problem("telemetry: %d simulator messages missing, %d duplicated", rep.TelemetryMissing, rep.TelemetryDuplicated)
	}
}

// mavlinkSent records the frames the MAVLink simulator sent, per system id.
type mavlinkSent struct {
	mu     stdsync.Mutex
	frames map[uint8][]string
}

// tap is mavlink.SimConfig.Tap.
func (m *mavlinkSent) tap(sysid uint8, frame []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frames == nil {
		m.frames = map[uint8][]string{}
	}
	m.frames[sysid] = append(m.frames[sysid], string(frame))
}

// checkMAVLink checks that each MAVLink drone's events at the centre are
// the frames the simulator sent, byte for byte, each once, in order.
func checkMAVLink(rep *Report, sent *mavlinkSent, items []centralread.Item) {
	sent.mu.Lock()
	defer sent.mu.Unlock()
	got := map[string][]string{}
	for _, it := range items {
		if r := it.Event.Record; it.Kind == centralread.ItemEvent && r.ContentType == mavlink.ContentType {
			got[r.RoutingKey] = append(got[r.RoutingKey], string(r.Payload))
			rep.MAVLinkCentral++
		}
	}
	for _, sysid := range slices.Sorted(maps.Keys(sent.frames)) {
		want, have := sent.frames[sysid], got[mavlinkName(sysid)]
		rep.MAVLinkSent += len(want)
		if slices.Equal(want, have) {
			continue
		}
		count := map[string]int{}
		for _, f := range want {
			count[f]++
		}
		for _, f := range have {
			count[f]--
		}
		missing, dup := 0, 0
		for _, c := range count {
			if c > 0 {
				missing += c
			} else {
				dup -= c
			}
		}
		rep.MAVLinkMissing += missing
		rep.MAVLinkDuplicated += dup
		if missing+dup == 0 {
			rep.MAVLinkOutOfOrder++
		}
		rep.problem("mavlink drone %s: sent %d frames, %d at the centre: %d missing, %d duplicated (or other bytes), order kept %v",
			mavlinkName(sysid), len(want), len(have), missing, dup, missing+dup > 0)
	}
}

// exportClip exports the first video drone's whole flight from the central
// store, as `edge-agent export video` does, and has ffprobe decode it when
// installed.
func exportClip(ctx context.Context, rep *Report, o Options, nc *nats.Conn, agentID string) {
	rep.Clip = o.Clip
	if rep.Clip == "" {
		rep.Clip = filepath.Join(o.DataDir, droneName(1)+".h264")
	}
	f, err := os.Create(rep.Clip)
	if err != nil {
		rep.problem("video: clip: %v", err)
		return
	}
	st, err := centralread.ExportVideo(ctx, nc, centralread.ExportOptions{Agent: agentID, Drone: droneName(1), FromNs: 0, ToNs: math.MaxInt64}, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	rep.ClipChunks = st.Chunks
	if err != nil {
		rep.problem("video: export of %s: %v", droneName(1), err)
		return
	}
	if st.Chunks == 0 {
		rep.problem("video: no chunk of %s at the centre", droneName(1))
		return
	}
	frames, errText, err := ffprobeFrames(rep.Clip)
	if errors.Is(err, exec.ErrNotFound) {
		return
	}
	if err != nil {
		rep.problem("video: ffprobe: %v", err)
		return
	}
	rep.ClipFrames, rep.ClipError = frames, errText
	if frames == 0 || errText != "" {
		rep.problem("video: the exported clip does not decode cleanly: %d frames, %q", frames, errText)
	}
}

// ffprobeFrames counts the decodable frames of an H.264 elementary stream.
func ffprobeFrames(path string) (int, string, error) {
	bin, err := exec.LookPath("ffprobe")
	if err != nil {
		return 0, "", exec.ErrNotFound
	}
	cmd := exec.Command(bin, "-v", "error", "-f", "h264", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, stderr.String(), err
	}
	var n int
	fmt.Sscanf(strings.TrimSpace(string(out)), "%d", &n)
	return n, strings.TrimSpace(stderr.String()), nil
}
