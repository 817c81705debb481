package watermark

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/edge-agent/edge-agent/localstream"
)

// The data-driven tests in testdata/*.txt drive the deterministic core
// over a hand-built topology (simStream), one harness per file. They are
// github.com/cockroachdb/datadriven scripts (as etcd raft's); each case is
//
//	<command> [key=value ...]
//	----
//	<expected output, up to a blank line>
//
// Commands:
//
//	stream [segments=N] [idle=DUR] [lateness=NS]  reset: a stream "video" of N segments;
//	       [skew=DUR] [behind=DUR]                 with clock bounds (MaxClockSkew, MaxClockBehind)
//	tick DUR                                       advance the clock
//	append writer=W key=K t=NS [asked=1]           Admit at the clock (unless asked before), append,
//	       [last=NS]                               NoteAdmitted (what ingest does); t may be now±DUR;
//	                                               last is the event's latest time (a video chunk's
//	                                               last frame), noted instead of t
//	skew                                           clock-skew counters and behind writers
//	note writer=W t=NS pos=E.N@OFF                 a raw Note
//	late writer=W t=NS                             a raw Late
//	close writer=W                                 CloseWriter
//	split seg=E.N n=N / merge segs=E.N,E.N         scaling
//	local                                          the local watermark
//	commit [cut=TEXT]                              CommittedAt(cut); default the tail cut
//	tail                                           print the tail cut
//	restart [marks=lost]                           rebuild the core from its records (with
//	                                               marks=lost, writer records as of their first mark)
//
// Run with -rewrite to rewrite the expected outputs (then review the diff).
// The files are found by a glob, not datadriven.Walk: testdata/fuzz holds
// the fuzz corpus.
func TestDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			h := &ddHarness{}
			h.reset(nil)
			datadriven.RunTest(t, f, h.run)
		})
	}
}

// ddHarness is the state a data file drives.
type ddHarness struct {
	sim *simStream
	c   *core
	now int64
	// epoch, when set, is the clock's start: times print as T±DUR.
	epoch int64
}

// wm renders a watermark, its times relative to the epoch if set.
func (h *ddHarness) wm(w Watermark) string {
	if h.epoch == 0 || w.IsZero() {
		return w.String()
	}
	rel := func(ns int64) string {
		d := time.Duration(ns - h.epoch)
		if d < 0 {
			return "T-" + (-d).String()
		}
		return "T+" + d.String()
	}
	return fmt.Sprintf("lower=%s upper=%s cut=%s", rel(w.LowerNs), rel(w.UpperNs), w.Cut)
}

func (h *ddHarness) reset(args map[string]string) {
	n := 1
	if v, ok := args["segments"]; ok {
		n, _ = strconv.Atoi(v)
	}
	idle := int64(0)
	if v, ok := args["idle"]; ok {
		idle = parseDur(v)
	}
	lateness := int64(0)
	if v, ok := args["lateness"]; ok {
		lateness = parseDur(v)
	}
	cfg := coreConfig{idleNs: idle, latenessNs: lateness}
	if v, ok := args["skew"]; ok {
		cfg.skewNs = parseDur(v)
	}
	if v, ok := args["behind"]; ok {
		cfg.behindNs = parseDur(v)
	}
	h.sim = newSimStream("video", n)
	h.c = newCore("video", cfg)
	h.now, h.epoch = 1_000_000, 0
	if cfg.skewNs != 0 || cfg.behindNs != 0 {
		// A real clock (2027), so that "a day behind" is after 1970;
		// times print relative to it as T±DUR.
		h.now = 1_800_000_000_000_000_000
		h.epoch = h.now
	}
}

func parseDur(v string) int64 {
	if d, err := time.ParseDuration(v); err == nil {
		return int64(d)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

func parseSeg(v string) localstream.SegmentID {
	e, n, _ := strings.Cut(v, ".")
	ei, _ := strconv.ParseUint(e, 10, 32)
	ni, _ := strconv.ParseUint(n, 10, 32)
	return localstream.NewSegmentID(uint32(ei), uint32(ni))
}

func (h *ddHarness) run(t *testing.T, d *datadriven.TestData) string {
	line := d.Pos + " " + d.Cmd
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			args["_"] = a.Key
			continue
		}
		args[a.Key] = a.Vals[0]
	}
	num := func(k string) int64 {
		if rel, ok := strings.CutPrefix(args[k], "now"); ok {
			// now, now+DUR, now-DUR: relative to the harness clock.
			if rel == "" {
				return h.now
			}
			d, err := time.ParseDuration(strings.TrimPrefix(rel, "+"))
			if err != nil {
				t.Fatalf("%s: bad %s: %v", line, k, err)
			}
			return h.now + int64(d)
		}
		v, err := strconv.ParseInt(args[k], 10, 64)
		if err != nil {
			t.Fatalf("%s: bad %s: %v", line, k, err)
		}
		return v
	}
	switch d.Cmd {
	case "stream":
		h.reset(args)
		return ""
	case "tick":
		h.now += parseDur(args["_"])
		return ""
	case "append":
		w, tm := args["writer"], num("t")
		var adm Admission
		if _, skip := args["asked"]; !skip {
			adm = h.c.admit(w, tm, h.now, h.now)
		}
		late := adm.Late
		p := h.sim.append(args["key"])
		h.sim.events = append(h.sim.events, simEvent{pos: p, writer: w, t: tm, late: late})
		out := fmt.Sprintf("pos=%s late=%v", p, late)
		if adm.Skew != SkewNone {
			out += " skew=" + adm.Skew.String()
		}
		noted := tm
		if _, ok := args["last"]; ok {
			noted = num("last")
		}
		if err := h.c.noteMark(h.sim.snapshot(), w, adm.Mark(noted), p, h.now, adm.Skew == SkewBehind); err != nil {
			out += " note: " + errName(err)
		}
		return out
	case "note":
		ps, off, _ := strings.Cut(args["pos"], "@")
		o, _ := strconv.ParseUint(off, 10, 64)
		p := localstream.Position{Segment: parseSeg(ps), Offset: o}
		if err := h.c.note(h.sim.snapshot(), args["writer"], num("t"), p, h.now); err != nil {
			return "note: " + errName(err)
		}
		return "ok"
	case "late":
		return fmt.Sprintf("late=%v", h.c.late(args["writer"], num("t"), h.now))
	case "close":
		h.c.close(args["writer"])
		return ""
	case "split":
		ids, err := h.sim.split(parseSeg(args["seg"]), int(num("n")))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(ids)
	case "merge":
		var ids []localstream.SegmentID
		for s := range strings.SplitSeq(args["segs"], ",") {
			ids = append(ids, parseSeg(s))
		}
		id, err := h.sim.merge(ids...)
		if err != nil {
			t.Fatal(err)
		}
		return id.String()
	case "local":
		w, err := h.c.localAt(h.sim.snapshot(), h.now)
		if err != nil {
			return "error: " + err.Error()
		}
		h.checkClock(t, line, w)
		return h.wm(w)
	case "skew":
		var b strings.Builder
		fmt.Fprintf(&b, "ahead=%d behind=%d floored=%d", h.c.stats.ClockSkewAhead, h.c.stats.ClockSkewBehind, h.c.stats.ClockFloored)
		for _, id := range h.c.writerIDs() {
			w := h.c.writers[id]
			if w.skewAhead > 0 || w.skewBehind > 0 {
				fmt.Fprintf(&b, "\n%s: ahead=%d behind=%d is_behind=%v", id, w.skewAhead, w.skewBehind, w.behind)
			}
		}
		return b.String()
	case "commit":
		topo := h.sim.snapshot()
		cut := topo.TailCut()
		if v, ok := args["cut"]; ok {
			var err error
			if cut, err = localstream.ParseStreamCut(v); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		}
		w, err := h.c.committedAt(topo, cut, h.now)
		if err != nil {
			return "error: " + errName(err)
		}
		h.checkClock(t, line, w)
		h.checkPromise(t, line, w)
		if ok, err := topo.LessEq(w.Cut, cut); w.IsZero() == false && (err != nil || !ok) {
			t.Errorf("%s:%s: committed watermark cut %s passes the committed cut %s (%v)", line, "", w.Cut, cut, err)
		}
		return h.wm(w)
	case "tail":
		return h.sim.snapshot().TailCut().String()
	case "restart":
		return h.restart(t, args["marks"] != "lost")
	}
	t.Fatalf("unknown command %q", line)
	return ""
}

// restart rebuilds the core from what a Tracker would have persisted:
// every writer record (or, with lost marks, only the first mark of each
// writer) and the published watermarks, then holds as NewTracker does.
func (h *ddHarness) restart(t *testing.T, marks bool) string {
	topo := h.sim.snapshot()
	old := h.c
	h.c = newCore(old.stream, old.config())
	for id, w := range old.writers {
		r := recordOf(w)
		if !marks && w.hasMark {
			first := w.hist[0]
			if w.base != nil {
				first = *w.base
			}
			r.noted, r.maxSeen, r.pos, r.base = w.floor, w.floor, first.pos, nil
		}
		b := r.marshal()
		back, err := unmarshalWriterRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		h.c.restore(topo, id, back)
	}
	var local []Watermark
	if !old.local.IsZero() {
		local = []Watermark{old.local}
	}
	h.c.restoreWatermarks(topo, local, old.results, old.pruned)
	h.c.holdUntil(topo.TailCut())
	return fmt.Sprintf("writers=%d hold until %s", len(h.c.writers), topo.TailCut())
}

// checkClock checks rule 12 on every watermark a file prints: with a
// clock skew configured, no watermark is ahead of the harness clock plus it.
func (h *ddHarness) checkClock(t *testing.T, line string, w Watermark) {
	if h.c.skewNs <= 0 || w.IsZero() {
		return
	}
	if limit := h.now + h.c.skewNs; w.LowerNs > limit || w.UpperNs > limit {
		t.Errorf("%s: watermark %s is ahead of the receiving clock %d + skew %d", line, w, h.now, h.c.skewNs)
	}
}

// checkPromise checks a watermark's promise on every watermark a file
// prints: every appended event after its cut that is not flagged late has
// a time of at least its lower bound.
func (h *ddHarness) checkPromise(t *testing.T, line string, w Watermark) {
	if w.IsZero() {
		return
	}
	topo := h.sim.snapshot()
	for _, e := range h.sim.events {
		if e.late || e.t >= w.LowerNs {
			continue
		}
		in, err := markInside(topo, w.Cut, mark{pos: []localstream.Position{e.pos}})
		if err != nil || !in {
			t.Errorf("%s: watermark %s passes the non-late event of %s at %s, time %d (%v)", line, h.wm(w), e.writer, e.pos, e.t, err)
		}
	}
}

// errName renders an error by its sentinel, so outputs do not depend on wording.
func errName(err error) string {
	for _, s := range []error{ErrTimeBackwards, ErrPositionNotAdvancing, ErrCutRegressed, ErrInvalidWriter, ErrTooManyWriters, localstream.ErrForeignCut} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return err.Error()
}
