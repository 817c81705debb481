package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/flight"

	"github.com/foxglove/mcap/go/mcap"

	"github.com/edge-agent/edge-agent/internal/testkit/flyrig"
)

// TestExportFlightAndVerify flies the MAVLink drone with video under one
// id, finds its flight by arm/disarm, exports it, and checks the record
// against the centre and the sender; then verify passes on it and fails,
// naming the cause, on each tampered copy.
func TestExportFlightAndVerify(t *testing.T) {
	f := fly(t, flyrig.Options{}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := connect(t, f.Central.ClientURL())
	flights, err := flight.Find(ctx, nc, flight.FindOptions{Drone: testDrone})
	if err != nil {
		t.Fatal(err)
	}
	if len(flights) != 1 || flights[0].Open || flights[0].Rule != "mavlink-armed" || flights[0].Agent != testAgent {
		t.Fatalf("flights = %+v, want one closed mavlink-armed flight of %s", flights, testAgent)
	}
	fl := flights[0]
	if d := time.Duration(fl.EndNs - fl.StartNs); d < 6*time.Second || d > 10*time.Second || fl.StartUncertaintyNs > int64(2*time.Second) {
		// 7 s armed; heartbeats at 1 Hz, late on a loaded machine.
		t.Fatalf("flight %+v lasts %v, want about 7 s with ≤ 2 s uncertainty (heartbeats at 1 Hz)", fl, d)
	}
	key := newKey(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "flight.mcap")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var tlog bytes.Buffer
	res, err := flight.Export(ctx, nc, fl, flight.ExportOptions{FindOptions: flight.FindOptions{Drone: testDrone}, N: 1, Key: key, Tlog: &tlog}, out)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	cert := res.Certificate
	if cert.Status != flight.StatusComplete {
		t.Fatalf("certificate %s: %v", cert.Status, cert.Reasons)
	}
	counts := map[string]int{}
	for _, c := range cert.Channels {
		counts[c.Topic] = c.Messages
	}
	// Every MAVLink frame the drone sent while armed (by its HEARTBEATs'
	// window), once and in order: the record's /mavlink channel is a
	// contiguous run of the sender's log.
	mav := readTopic(t, path, "/mavlink/"+testDrone)
	if len(mav) < 300 || len(mav) != counts["/mavlink/"+testDrone] {
		t.Fatalf("%d MAVLink messages in the file, certificate %d", len(mav), counts["/mavlink/"+testDrone])
	}
	start := -1
	for i, fr := range f.Sent.Frames() {
		if bytes.Equal(fr, mav[0].Data) {
			start = i
			break
		}
	}
	if start < 0 || start+len(mav) > len(f.Sent.Frames()) {
		t.Fatalf("the record's first frame is not in the sender's log")
	}
	for i, m := range mav {
		if !bytes.Equal(m.Data, f.Sent.Frames()[start+i]) {
			t.Fatalf("frame %d of the record is not the sender's frame %d: a frame lost, repeated or reordered", i, start+i)
		}
	}
	if counts["/video/"+testDrone] < 100 || counts["/position/"+testDrone] < 50 || counts["/health/"+testAgent] < 3 {
		t.Fatalf("channels %v: want video, positions and health", counts)
	}
	if tlog.Len() != len(mav)*8+sumLen(mav) {
		t.Fatalf("tlog holds %d bytes, want %d frames with 8-byte times", tlog.Len(), len(mav))
	}

	checkKeyframes(t, path, "/video/"+testDrone)
	t.Run("read by @mcap/core", func(t *testing.T) { checkWithMCAPJS(t, nc, path, fl) })
	t.Run("centre re-read", func(t *testing.T) {
		diffs, err := flight.CheckCentral(ctx, nc, cert, flight.DefaultStreams())
		if err != nil || len(diffs) != 0 {
			t.Fatalf("against the centre: %v %v", diffs, err)
		}
		bad := cert
		bad.Events--
		bad.Keys = bad.Keys[1:]
		diffs, err = flight.CheckCentral(ctx, nc, bad, flight.DefaultStreams())
		if err != nil || len(diffs) != 2 || !strings.HasPrefix(diffs[0], "events:") || !strings.HasPrefix(diffs[1], "routing keys:") {
			t.Fatalf("a certificate one event short: %q %v", diffs, err)
		}
	})

	pub := key.Public().(ed25519.PublicKey)
	sidecar := flight.NewSidecar(cert, res.SHA256, key)
	rep := verifyFile(t, path, flight.VerifyOptions{Trusted: []ed25519.PublicKey{pub}, Sidecar: &sidecar})
	if err := rep.Err(); err != nil {
		t.Fatalf("verify on the export: %v", err)
	}
	if rep.Messages < len(mav) {
		t.Fatalf("verify read %d messages", rep.Messages)
	}

	// Tampered copies: each fails, naming its cause.
	other := newKey(t).Public().(ed25519.PublicKey)
	for _, tc := range []struct {
		name   string
		edit   func(topic string, seq uint32, data []byte) ([]byte, bool) // nil: unchanged
		opts   flight.VerifyOptions
		reason string
	}{
		{name: "one message removed", edit: dropNth("/video/"+testDrone, 5), reason: "a message was removed"},
		{name: "one byte of a frame changed", edit: flipByte("/video/"+testDrone, 7), reason: "does not match the SHA-256 of its entry"},
		{name: "signed by another key", opts: flight.VerifyOptions{Trusted: []ed25519.PublicKey{other}}, reason: "which is not a trusted key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := path
			if tc.edit != nil {
				p = rewrite(t, path, tc.edit)
			}
			rep := verifyFile(t, p, tc.opts)
			if err := rep.Err(); err == nil || !strings.Contains(strings.Join(rep.Problems, "\n"), tc.reason) {
				t.Fatalf("verify = %v (%q), want a failure naming %q", err, rep.Problems, tc.reason)
			}
		})
	}
}

func sumLen(ms []*mcap.Message) int {
	n := 0
	for _, m := range ms {
		n += len(m.Data)
	}
	return n
}

func verifyFile(t *testing.T, path string, o flight.VerifyOptions) *flight.VerifyReport {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	rep, err := flight.Verify(fh, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// readTopic returns a topic's messages in file order.
func readTopic(t *testing.T, path, topic string) []*mcap.Message {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := mcap.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	it, err := r.Messages(mcap.UsingIndex(false), mcap.WithTopics([]string{topic}))
	if err != nil {
		t.Fatal(err)
	}
	var out []*mcap.Message
	for {
		_, _, m, err := it.NextInto(nil)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
}

func dropNth(topic string, n int) func(string, uint32, []byte) ([]byte, bool) {
	i := 0
	return func(tp string, _ uint32, d []byte) ([]byte, bool) {
		if tp != topic {
			return d, true
		}
		i++
		return d, i != n
	}
}

func flipByte(topic string, n int) func(string, uint32, []byte) ([]byte, bool) {
	i := 0
	return func(tp string, _ uint32, d []byte) ([]byte, bool) {
		if tp != topic {
			return d, true
		}
		if i++; i == n {
			v, err := decodeVideo(d)
			if err != nil {
				panic(err)
			}
			v.Data = bytes.Clone(v.Data)
			v.Data[len(v.Data)/2] ^= 0x40
			if d, err = v.encode(); err != nil {
				panic(err)
			}
		}
		return d, true
	}
}

// rewrite copies a record through the MCAP library, message by message
// through edit (which may change or drop one), with its attachments and
// metadata: what someone who tampers with a record would do.
func rewrite(t *testing.T, path string, edit func(topic string, seq uint32, data []byte) ([]byte, bool)) string {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, err := mcap.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	info, err := r.Info()
	if err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(t.TempDir(), "tampered.mcap")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w, err := mcap.NewWriter(out, &mcap.WriterOptions{Chunked: true, ChunkSize: 4 << 20, Compression: mcap.CompressionZSTD})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteHeader(&mcap.Header{}))
	for _, s := range info.Schemas {
		must(w.WriteSchema(s))
	}
	for _, c := range info.Channels {
		must(w.WriteChannel(c))
	}
	in.Seek(0, io.SeekStart)
	r, _ = mcap.NewReader(in)
	it, err := r.Messages(mcap.UsingIndex(false))
	must(err)
	for {
		_, ch, m, err := it.NextInto(nil)
		if err == io.EOF {
			break
		}
		must(err)
		d, keep := edit(ch.Topic, m.Sequence, m.Data)
		if !keep {
			continue
		}
		m.Data = d
		must(w.WriteMessage(m))
	}
	for _, a := range info.AttachmentIndexes {
		ar, err := r.GetAttachmentReader(a.Offset)
		must(err)
		b, err := io.ReadAll(ar.Data())
		must(err)
		must(w.WriteAttachment(&mcap.Attachment{Name: a.Name, MediaType: a.MediaType, LogTime: a.LogTime, CreateTime: a.CreateTime, DataSize: uint64(len(b)), Data: bytes.NewReader(b)}))
	}
	must(w.Close())
	return outPath
}

// checkKeyframes checks that every H.264 access unit with an IDR slice
// carries its SPS and PPS before it (Foxglove decodes from any keyframe).
func checkKeyframes(t *testing.T, path, topic string) {
	t.Helper()
	keys := 0
	for i, m := range readTopic(t, path, topic) {
		v, err := decodeVideo(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var sps, pps bool
		for _, nal := range bytes.Split(v.Data, []byte{0, 0, 1})[1:] {
			if len(nal) == 0 {
				continue
			}
			switch nal[0] & 0x1f {
			case 7:
				sps = true
			case 8:
				pps = true
			case 5:
				if !sps || !pps {
					t.Fatalf("access unit %d: an IDR slice without SPS and PPS before it", i)
				}
				keys++
			}
		}
	}
	if keys == 0 {
		t.Fatal("no keyframe in the record's video")
	}
}
