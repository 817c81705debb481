package replicate

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/edge-agent/edge-agent/localstream"
)

// The resume decision (Decide) as a table: testdata/resume/*.txt state,
// case by case, what the chain's last record and the local store are, and
// what the store does. Each case is
//
//	# why (the rule of docs/sync.md "Lost state" it shows)
//	decide
//	store id=S1 run=r1 [runs=r0,...] [station=M1] [base=N] [takeover]
//	local len=N [seg=E.N] [head=C] [recovered=C] [committed=C] [recorded=C [by=RUN]]
//	      [after=RUN:OFF,...] [decided]
//	run started=SEQ [known=SEQ] [own=N] [adopted=N] [silent=DUR]
//	chain empty | chain seq=N [store=S] [run=R] [station=M] [base=N] cut=C
//	----
//	<the decision>
//
// store: this store's identity, this run, its other runs (the instance
// notes it keeps), its station (absent: unknown), the epoch base in use and
// the operator's --takeover. local: the local stream, one segment (0.0, or
// seg) of len events; its head (first retained), the tail recovered at
// Open (default len), what this store knows it committed, the local record
// of the committed cut as it was opened and the run that wrote it (no by:
// a version before identities), and the lowest tail an Open found after a
// run's Open (after). run: the run already read the chain (at seq started)
// and knows commits up to known; own commits made, predecessors' commits
// adopted; silent: the clock is that much later. chain: the chain's last
// record at the centre; no store: written before identities. A cut C is
// E.N=OFF,... or, for the local segment, a bare offset.
//
// The decision prints as
//
//	continue|resend|rebase from=LOCAL-CUT base=N [adopt]
//	gap REASON of=STORE from=CENTRAL-CUT to=CENTRAL-CUT|unknown seq=N
//	refuse twin|fenced names ID ...   (the identities the error names, in order)
//
// They are github.com/cockroachdb/datadriven scripts; run with -rewrite to
// rewrite the expected outputs (then review the diff).
func TestDecideScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/resume", func(t *testing.T, path string) {
		cases := 0
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "decide" {
				d.Fatalf(t, "%q, want decide", d.Cmd)
			}
			cases++
			got, err := runDecideCase(strings.Split(d.Input, "\n"))
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return strings.Join(got, "\n")
		})
		if cases == 0 {
			t.Fatalf("%s: no cases", path)
		}
	})
}

// scriptNow is the clock of every case (plus run silent=DUR).
var scriptNow = time.Unix(1_700_000_000, 0)

// runDecideCase builds the input from a case's lines, decides, checks the
// promises every decision keeps and renders it.
func runDecideCase(input []string) ([]string, error) {
	in := ResumeInput{Stream: "t", Now: scriptNow}
	seg := localstream.SegmentID(0)
	var after map[string]localstream.StreamCut
	for _, l := range input {
		verb, args, err := scriptArgs(l)
		if err != nil {
			return nil, err
		}
		cut := func(k string) (localstream.StreamCut, error) { return scriptCut(args[k], seg) }
		switch verb {
		case "store":
			in.Store, in.Instance, in.Station = args["id"], args["run"], args["station"]
			runs := map[string]bool{in.Instance: true}
			for r := range strings.SplitSeq(args["runs"], ",") {
				runs[r] = r != ""
			}
			in.KnownInstance = func(i string) bool { return runs[i] }
			_, in.Takeover = args["takeover"]
			if in.Base, err = scriptUint32(args["base"]); err != nil {
				return nil, err
			}
		case "local":
			if v, ok := args["seg"]; ok {
				if seg, err = scriptSeg(v); err != nil {
					return nil, err
				}
			}
			n, err := strconv.ParseUint(args["len"], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("local len: %w", err)
			}
			in.Topo = localstream.Topology{Stream: "t", Segments: map[localstream.SegmentID]localstream.Segment{
				seg: {ID: seg, Range: localstream.KeyRange{Low: 0, High: 1}, Length: n}}}
			in.Head, in.Recovered = atSeg(seg, 0), atSeg(seg, n)
			for k, dst := range map[string]*localstream.StreamCut{"head": &in.Head, "recovered": &in.Recovered} {
				if _, ok := args[k]; ok {
					if *dst, err = cut(k); err != nil {
						return nil, err
					}
				}
			}
			for k, dst := range map[string]**localstream.StreamCut{"committed": &in.Committed, "recorded": &in.RecordedAtOpen} {
				if _, ok := args[k]; ok {
					c, err := cut(k)
					if err != nil {
						return nil, err
					}
					*dst = &c
				}
			}
			in.RecordedBy = args["by"]
			_, in.Decided = args["decided"]
			if v, ok := args["after"]; ok {
				after = map[string]localstream.StreamCut{}
				for p := range strings.SplitSeq(v, ",") {
					run, off, _ := strings.Cut(p, ":")
					if after[run], err = scriptCut(off, seg); err != nil {
						return nil, err
					}
				}
				in.RecoveredAfter = func(i string) (localstream.StreamCut, bool) { c, ok := after[i]; return c, ok }
			}
		case "run":
			in.Started = true
			if in.StartSeq, err = strconv.ParseUint(args["started"], 10, 64); err != nil {
				return nil, fmt.Errorf("run started: %w", err)
			}
			in.KnownSeq = in.StartSeq
			for k, dst := range map[string]*uint64{"known": &in.KnownSeq} {
				if v, ok := args[k]; ok {
					if *dst, err = strconv.ParseUint(v, 10, 64); err != nil {
						return nil, err
					}
				}
			}
			for k, dst := range map[string]*int{"own": &in.OwnCommits, "adopted": &in.Adopted} {
				if v, ok := args[k]; ok {
					if *dst, err = strconv.Atoi(v); err != nil {
						return nil, err
					}
				}
			}
			if v, ok := args["silent"]; ok {
				d, err := time.ParseDuration(v)
				if err != nil {
					return nil, err
				}
				in.Now = scriptNow.Add(d)
			}
		case "chain":
			if _, ok := args["empty"]; ok {
				continue
			}
			seq, err := strconv.ParseUint(args["seq"], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("chain seq: %w", err)
			}
			base, err := scriptUint32(args["base"])
			if err != nil {
				return nil, err
			}
			c, err := cut("cut")
			if err != nil {
				return nil, err
			}
			in.Last = recordOn(args["station"], seq, args["store"], args["run"], base, c)
		default:
			return nil, fmt.Errorf("unknown line %q", l)
		}
	}
	if in.Topo.Segments == nil || in.KnownInstance == nil {
		return nil, errors.New("a case needs a store and a local line")
	}
	act := Decide(in)
	if err := checkDecision(in, act); err != nil {
		return nil, err
	}
	return renderDecision(in, act), nil
}

// checkDecision checks what every decision promises (Decide's doc): a
// refusal explains itself, nothing else does, and a rebase sends under a
// base beyond every epoch of the chain's last record.
func checkDecision(in ResumeInput, act ResumeAction) error {
	if (act.Kind == ResumeRefuse) != (act.Err != nil) {
		return fmt.Errorf("decision %s with error %v", act.Kind, act.Err)
	}
	if act.Kind == ResumeRebase && in.Last.Seq > 0 {
		c, _ := in.Last.Record.StreamCut()
		if act.Base <= maxEpoch(c) {
			return fmt.Errorf("rebase under base %d, not beyond the chain's epoch %d", act.Base, maxEpoch(c))
		}
	}
	return nil
}

func renderDecision(in ResumeInput, act ResumeAction) []string {
	if act.Kind == ResumeRefuse {
		kind := "fenced"
		if errors.Is(act.Err, ErrTwin) {
			kind = "twin"
		} else if !errors.Is(act.Err, ErrFenced) {
			kind = "other"
		}
		rec := in.Last.Record
		return []string{fmt.Sprintf("refuse %s names %s", kind,
			strings.Join(namedIn(act.Err.Error(), in.Store, in.Instance, in.Station, rec.Store, rec.Instance, rec.Station), " "))}
	}
	s := fmt.Sprintf("%s from=%s base=%d", act.Kind, shortCut(act.From), act.Base)
	if act.Adopt {
		s += " adopt"
	}
	out := []string{s}
	if l := act.Lost; l != nil {
		from, _ := l.From.Cut("t")
		to := "unknown"
		if len(l.To) > 0 {
			c, _ := l.To.Cut("t")
			to = shortCut(c)
		}
		store := l.Store
		if store == "" {
			store = "none"
		}
		g := fmt.Sprintf("gap %s of=%s from=%s to=%s", l.Reason, store, shortCut(from), to)
		if l.CentralSeq > 0 {
			g += fmt.Sprintf(" seq=%d", l.CentralSeq)
		}
		if l.FoundAtNs != in.Now.UnixNano() {
			g += fmt.Sprintf(" found_at_ns=%d", l.FoundAtNs)
		}
		out = append(out, g)
	}
	return out
}

// namedIn returns the identities among ids that msg names as words, in
// the order it names them.
func namedIn(msg string, ids ...string) []string {
	type hit struct {
		at int
		id string
	}
	var hits []hit
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		for from := 0; ; {
			i := strings.Index(msg[from:], id)
			if i < 0 {
				break
			}
			i += from
			end := i + len(id)
			if (i == 0 || !isWordByte(msg[i-1])) && (end == len(msg) || !isWordByte(msg[end])) {
				hits = append(hits, hit{i, id})
				break
			}
			from = end
		}
	}
	sort.Slice(hits, func(a, b int) bool { return hits[a].at < hits[b].at })
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.id
	}
	return out
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// shortCut is a cut's text without the stream name.
func shortCut(c localstream.StreamCut) string {
	if c.Positions == nil {
		return "none"
	}
	_, s, _ := strings.Cut(c.String(), ":")
	return s
}

// scriptArgs parses a case's input line "verb k=v flag ..." (datadriven's
// syntax) into the verb and its arguments.
func scriptArgs(l string) (string, map[string]string, error) {
	verb, cmdArgs, err := datadriven.ParseLine(l)
	if err != nil {
		return "", nil, err
	}
	if verb == "" {
		return "", nil, errors.New("empty line")
	}
	args := map[string]string{}
	for _, a := range cmdArgs {
		if _, dup := args[a.Key]; dup {
			return "", nil, fmt.Errorf("%q: %s twice", l, a.Key)
		}
		if len(a.Vals) > 1 {
			return "", nil, fmt.Errorf("%q: %s has %d values", l, a.Key, len(a.Vals))
		}
		args[a.Key] = ""
		if len(a.Vals) == 1 {
			args[a.Key] = a.Vals[0]
		}
	}
	return verb, args, nil
}

// scriptCut parses E.N=OFF,... or a bare offset in seg.
func scriptCut(v string, seg localstream.SegmentID) (localstream.StreamCut, error) {
	if !strings.Contains(v, "=") {
		off, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return localstream.StreamCut{}, fmt.Errorf("cut %q: %w", v, err)
		}
		return atSeg(seg, off), nil
	}
	return localstream.ParseStreamCut("t:" + v)
}

func scriptSeg(v string) (localstream.SegmentID, error) {
	c, err := localstream.ParseStreamCut("t:" + v + "=0")
	if err != nil {
		return 0, err
	}
	return c.Segments()[0], nil
}

func scriptUint32(v string) (uint32, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	return uint32(n), err
}
