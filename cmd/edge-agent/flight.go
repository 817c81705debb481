package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edge-agent/edge-agent/flight"
)

func init() {
	commands["flights"] = command{
		summary: "list a drone's flights at the centre (arm to disarm, or an MQTT rule), with their events and complete or pending",
		run:     runFlights,
	}
	commands["verify"] = command{
		summary: "verify a flight record (MCAP): hashes, chain, signature and counts; given --central, against the centre too",
		run:     runVerify,
	}
	commands["flight-key"] = command{
		summary: "create the centre's Ed25519 key that signs flight certificates (KEY and KEY.pub)",
		run:     runFlightKey,
	}
}

// flightRuleFlags are the flags of how MQTT drones' flights are found.
func flightRuleFlags(fs *flag.FlagSet) (*flight.FindOptions, *string) {
	o := &flight.FindOptions{}
	fs.StringVar(&o.Drone, "drone", "", "drone `ID` (required)")
	fs.StringVar(&o.Agent, "agent", "", "only this agent `ID`")
	fs.StringVar(&o.Rule.ArmedField, "armed-field", "", "MQTT drones: a JSON `PATH` (status.armed) that is true in flight (default: the silence rule)")
	fs.DurationVar(&o.Rule.Silence, "silence", flight.DefaultSilence, "MQTT drones without --armed-field: a silence longer than `D` ends a flight")
	streams := fs.String("streams", "telemetry,video,health", "central `NAMES` of the telemetry, video and health streams")
	return o, streams
}

func parseStreams(s string) (flight.Streams, error) {
	p := strings.Split(s, ",")
	if len(p) != 3 {
		return flight.Streams{}, usagef("--streams %q: want TELEMETRY,VIDEO,HEALTH", s)
	}
	return flight.Streams{Telemetry: p[0], Video: p[1], Health: p[2]}, nil
}

// runFlights: edge-agent flights --drone D [--agent A] [--json].
func runFlights(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("flights", stderr)
	conn := addCentralFlags(fs)
	o, streams := flightRuleFlags(fs)
	asJSON := fs.Bool("json", false, "one JSON document per flight instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.Drone == "" {
		return usagef("--drone is required")
	}
	var err error
	if o.Streams, err = parseStreams(*streams); err != nil {
		return err
	}
	nc, err := conn.connect("edge-agent-flights")
	if err != nil {
		return err
	}
	defer nc.Close()
	fl, err := flight.Find(ctx, nc, *o)
	if err != nil {
		return fmt.Errorf("flights: %w", err)
	}
	if len(fl) == 0 {
		return fmt.Errorf("flights: drone %s has no telemetry at the centre", o.Drone)
	}
	// Each flight checked as its certificate would be, all of them in
	// one read of each stream.
	checks, err := flight.CheckFlights(ctx, nc, fl, *o)
	if err != nil {
		return fmt.Errorf("flights: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "FLIGHT\tAGENT\tSTART\tEND\tDURATION\tSTART ±\tEND ±\tEVENTS\tSTATUS")
	}
	for _, c := range checks {
		f := c.Flight
		status := "complete"
		if c.Status != flight.StatusComplete {
			status = "pending"
		}
		if *asJSON {
			b, _ := json.Marshal(struct {
				flight.Flight
				Status  string                `json:"status"`
				Reasons []string              `json:"reasons,omitempty"`
				Streams []flight.StreamReport `json:"streams"`
			}{f, status, c.Reasons, c.Streams})
			fmt.Fprintln(stdout, string(b))
			continue
		}
		var ev []string
		for _, s := range c.Streams {
			ev = append(ev, fmt.Sprintf("%s %d", s.Stream, s.Events))
		}
		end := time.Unix(0, f.EndNs).UTC().Format(time.RFC3339)
		if f.Open {
			end += " (in flight)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\t%v\t%v\t%s\t%s\n", f.N, f.Agent, time.Unix(0, f.StartNs).UTC().Format(time.RFC3339), end,
			time.Duration(f.EndNs-f.StartNs).Round(time.Second), time.Duration(f.StartUncertaintyNs).Round(time.Millisecond),
			time.Duration(f.EndUncertaintyNs).Round(time.Millisecond), strings.Join(ev, ", "), status)
	}
	return tw.Flush()
}

// runExportFlight: edge-agent export flight --drone D (--flight N | --from T1 --to T2) --key KEY -o FILE.
func runExportFlight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export flight", stderr)
	conn := addCentralFlags(fs)
	o, streams := flightRuleFlags(fs)
	n := fs.Int("flight", 0, "flight `N` of `edge-agent flights` (or --from/--to)")
	from := fs.String("from", "", "start `TIME` of a range (RFC 3339 or Unix ns) instead of --flight")
	to := fs.String("to", "", "end `TIME` of the range")
	keyFile := fs.String("key", os.Getenv("EDGE_FLIGHT_KEY"), "the centre's signing key `FILE` (edge-agent flight-key; default $EDGE_FLIGHT_KEY)")
	out := fs.String("o", "", "output `FILE` (flight.mcap); the certificate goes to FILE.cert.json")
	tlog := fs.String("tlog", "", "also write the flight's MAVLink frames as a tlog `FILE`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.Drone == "" || *out == "" || *keyFile == "" {
		return usagef("--drone, --key and -o are required")
	}
	if (*n > 0) == (*from != "" || *to != "") {
		return usagef("give either --flight N or --from and --to")
	}
	var err error
	if o.Streams, err = parseStreams(*streams); err != nil {
		return err
	}
	eo := flight.ExportOptions{FindOptions: *o, N: *n}
	if eo.FromNs, err = parseTimeFlag("from", *from); err != nil {
		return err
	}
	if eo.ToNs, err = parseTimeFlag("to", *to); err != nil {
		return err
	}
	if eo.Key, err = flight.LoadPrivateKey(*keyFile); err != nil {
		return usageError{err}
	}
	nc, err := conn.connect("edge-agent-export")
	if err != nil {
		return err
	}
	defer nc.Close()
	f, err := flight.Resolve(ctx, nc, eo)
	if err != nil {
		return fmt.Errorf("export flight: %w", err)
	}
	// Every file is written beside its name and renamed into place only
	// when whole: a failed export leaves nothing behind.
	var files []*atomicFile
	defer func() {
		for _, a := range files {
			a.abort()
		}
	}()
	open := func(path string) (*atomicFile, error) {
		a, err := createAtomic(path)
		if err == nil {
			files = append(files, a)
		}
		return a, err
	}
	mf, err := open(*out)
	if err != nil {
		return err
	}
	if *tlog != "" {
		tf, err := open(*tlog)
		if err != nil {
			return err
		}
		eo.Tlog = tf.w
	}
	res, err := flight.Export(ctx, nc, f, eo, mf.w)
	if err != nil {
		return fmt.Errorf("export flight: %w", err)
	}
	side, err := json.MarshalIndent(flight.NewSidecar(res.Certificate, res.SHA256, eo.Key), "", "  ")
	if err != nil {
		return err
	}
	cf, err := open(*out + ".cert.json")
	if err != nil {
		return err
	}
	cf.w.Write(append(side, '\n'))
	for _, a := range files {
		if err := a.commit(); err != nil {
			return fmt.Errorf("export flight: %w", err)
		}
	}
	files = nil
	c := res.Certificate
	fmt.Fprintf(stdout, "wrote %s: flight %d of %s (agent %s), %d events, %d bytes, %s\n", *out, f.N, f.Drone, f.Agent, c.Events, res.Bytes, c.Status)
	for _, r := range c.Reasons {
		fmt.Fprintf(stdout, "  incomplete: %s\n", r)
	}
	fmt.Fprintf(stdout, "certificate %s.cert.json (key %s)\n", *out, c.KeyID)
	return nil
}

// atomicFile is a file written under a temporary name in its directory
// and renamed into place by commit; abort removes it.
type atomicFile struct {
	f    *os.File
	w    io.Writer
	path string
	done bool
}

func createAtomic(path string) (*atomicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	return &atomicFile{f: f, w: f, path: path}, nil
}

func (a *atomicFile) commit() error {
	if err := a.f.Sync(); err != nil {
		return err
	}
	if err := a.f.Close(); err != nil {
		return err
	}
	a.done = true
	return os.Rename(a.f.Name(), a.path)
}

func (a *atomicFile) abort() {
	if !a.done {
		a.f.Close()
		os.Remove(a.f.Name())
	}
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// runVerify: edge-agent verify FILE [--pubkey KEY.pub ...] [--cert FILE.cert.json] [--central URL].
func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("verify", stderr)
	conn := addCentralFlags(fs)
	var pubs listFlag
	fs.Var(&pubs, "pubkey", "a trusted public key `FILE` (KEY.pub; repeat for old keys; default $EDGE_FLIGHT_PUBKEY)")
	certPath := fs.String("cert", "", "the certificate `FILE` (default FILE.cert.json when it exists)")
	streams := fs.String("streams", "telemetry,video,health", "central `NAMES` of the telemetry, video and health streams")
	requireComplete := fs.Bool("require-complete", false, "fail when the certificate says the flight is incomplete")
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if file == "" {
		return usagef("usage: edge-agent verify FILE.mcap [--pubkey KEY.pub] [--cert FILE.cert.json] [--central URLS]")
	}
	// Given --central (or --context), the centre is read again.
	againstCentral := false
	fs.Visit(func(f *flag.Flag) { againstCentral = againstCentral || f.Name == "central" || f.Name == "context" })
	if len(pubs) == 0 && os.Getenv("EDGE_FLIGHT_PUBKEY") != "" {
		pubs = append(pubs, os.Getenv("EDGE_FLIGHT_PUBKEY"))
	}
	var o flight.VerifyOptions
	for _, p := range pubs {
		k, err := flight.LoadPublicKey(p)
		if err != nil {
			return usageError{err}
		}
		o.Trusted = append(o.Trusted, k)
	}
	cp := *certPath
	if cp == "" {
		if _, err := os.Stat(file + ".cert.json"); err == nil {
			cp = file + ".cert.json"
		}
	}
	if cp != "" {
		b, err := os.ReadFile(cp)
		if err != nil {
			return err
		}
		var sc flight.Sidecar
		if err := json.Unmarshal(b, &sc); err != nil {
			return fmt.Errorf("verify: %s is not a certificate file: %w", cp, err)
		}
		o.Sidecar = &sc
	}
	fh, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fh.Close()
	rep, err := flight.Verify(fh, o)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	c := rep.Certificate
	fmt.Fprintf(stdout, "%s: flight %d of %s (agent %s), %d events, %d messages, sha256 %s\n", file, c.Flight.N, c.Flight.Drone, c.Flight.Agent, c.Events, rep.Messages, rep.SHA256)
	fmt.Fprintf(stdout, "certificate: %s, signed by key %s", c.Status, c.KeyID)
	if len(o.Trusted) == 0 {
		fmt.Fprint(stdout, " (not checked against a trusted key: give --pubkey)")
	}
	fmt.Fprintln(stdout)
	if cp == "" {
		fmt.Fprintln(stdout, "no certificate file: the file's own hash was not checked against a signed one")
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(stdout, "FAIL %s\n", p)
	}
	if againstCentral && rep.Err() == nil {
		st, err := parseStreams(*streams)
		if err != nil {
			return err
		}
		nc, err := conn.connect("edge-agent-verify")
		if err != nil {
			return err
		}
		defer nc.Close()
		diffs, err := flight.CheckCentral(ctx, nc, c, st)
		if err != nil {
			return fmt.Errorf("verify: against the centre: %w", err)
		}
		for _, d := range diffs {
			fmt.Fprintf(stdout, "FAIL centre: %s\n", d)
			rep.Problems = append(rep.Problems, "centre: "+d)
		}
		if len(diffs) == 0 {
			fmt.Fprintln(stdout, "the centre holds exactly what the certificate says")
		}
	}
	if err := rep.Err(); err != nil {
		return err
	}
	if *requireComplete && c.Status != flight.StatusComplete {
		return fmt.Errorf("verify: the flight is %s: %s", c.Status, strings.Join(c.Reasons, "; "))
	}
	fmt.Fprintln(stdout, "OK")
	return nil
}

// runFlightKey: edge-agent flight-key -o KEY.
func runFlightKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("flight-key", stderr)
	out := fs.String("o", "", "private key `FILE` to create (mode 0600); the public key goes to FILE.pub")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("-o is required")
	}
	pub, err := flight.CreateKey(*out)
	if errors.Is(err, flight.ErrKey) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s.pub (key %s)\n", *out, *out, flight.KeyID(pub))
	return nil
}
