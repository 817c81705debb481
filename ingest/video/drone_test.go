package video

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// nalPayloadBytes sums the NAL bytes of an Annex-B frame (start codes excluded)
// and counts its NAL units.
func nalPayloadBytes(b []byte) (sum, n int) {
	for _, nal := range splitAnnexB(b) {
		sum += len(nal)
		n++
	}
	return sum, n
}

func splitAnnexB(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, startCode)
		if i != 0 {
			return append(out, b) // not ours
		}
		b = b[4:]
		j := bytes.Index(b, startCode)
		if j < 0 {
			j = len(b)
		}
		out = append(out, b[:j])
		b = b[j:]
	}
	return out
}

// TestCaptureFrames replays each real capture through the drone state
// machine and checks frames, keyframes and PTS against the encoder's record
// (frames.csv, from ffprobe over the encoded stream) and the capture's SRs.
func TestCaptureFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec Codec
	}{{"h264", CodecH264}, {"h265", CodecH265}} {
		t.Run(tc.name, func(t *testing.T) {
			c := loadCapture(t, tc.name, tc.codec)
			cfg := testConfig()
			cfg.PayloadTypes = map[uint8]Codec{96: tc.codec}
			sink, marks := &recordSink{}, &recordMarks{}
			d := newDrone("d1", &cfg, nil, sink, marks, time.Now, nil)
			feed(t, d, c.pkts)
			got := decodeAll(t, sink.snapshot())
			checkFrames(t, c, got, expectedPTS(c.pkts))
			st := d.c.snapshot()
			if st.Lost != 0 || st.FramesDropped != 0 || st.FramesSkipped != 0 || st.SenderReports != 2 {
				t.Fatalf("stats %+v", st)
			}
			// Writer marks: after each chunk, the PTS of its last frame.
			if len(marks.notes) != len(got.chunks) {
				t.Fatalf("%d notes for %d chunks", len(marks.notes), len(got.chunks))
			}
			for i, ch := range got.chunks {
				if marks.notes[i] != ch.Frames[len(ch.Frames)-1].PTS || marks.pos[i].Offset != uint64(i) {
					t.Fatalf("note %d = %d@%v", i, marks.notes[i], marks.pos[i])
				}
			}
			if len(marks.closed) != 1 || marks.closed[0] != "video/d1" {
				t.Fatalf("closed %v", marks.closed)
			}
			ffprobeDecodes(t, tc.codec, got.stream, len(c.frames))
		})
	}
}

// checkFrames compares decoded chunks with the encoder's frames and the PTS.
func checkFrames(t *testing.T, c capture, got decoded, pts []int64) {
	t.Helper()
	if len(got.frames) != len(c.frames) {
		t.Fatalf("%d frames, encoder made %d", len(got.frames), len(c.frames))
	}
	if len(pts) != len(c.frames) {
		t.Fatalf("%d expected pts for %d frames", len(pts), len(c.frames))
	}
	for i, f := range got.frames {
		if f.Key != c.frames[i].key {
			t.Fatalf("frame %d key=%v, encoder says %v", i, f.Key, c.frames[i].key)
		}
		if f.PTS != pts[i] {
			t.Fatalf("frame %d pts %d, capture's SR mapping gives %d", i, f.PTS, pts[i])
		}
		// The encoder's frame size counts 3- or 4-byte start codes.
		sum, n := nalPayloadBytes(got.data[i])
		if d := c.frames[i].size - sum; d < 3*n || d > 4*n {
			t.Fatalf("frame %d: %d nal bytes in %d nals, encoder frame is %d bytes", i, sum, n, c.frames[i].size)
		}
	}
	for i, ch := range got.chunks {
		ev := got.events[i]
		if !ch.Frames[0].Key {
			t.Fatalf("chunk %d does not start with a keyframe", i)
		}
		for j, f := range ch.Frames[1:] {
			if f.Key {
				t.Fatalf("chunk %d has keyframe at %d", i, j+1)
			}
		}
		if ev.EventTime != ch.Frames[0].PTS || ev.Flags.Has(localstream.FlagEstimatedTime) {
			t.Fatalf("chunk %d: event time %d flags %b", i, ev.EventTime, ev.Flags)
		}
		if want := i == 0; ev.Flags.Has(localstream.FlagDiscontinuity) != want {
			t.Fatalf("chunk %d: discontinuity=%v", i, !want)
		}
		if ev.RoutingKey != "d1" || ev.Writer != "video/d1" || ev.ContentType != c.codec.ContentType() {
			t.Fatalf("chunk %d: %q %q %q", i, ev.RoutingKey, ev.Writer, ev.ContentType)
		}
	}
}

// ffprobeDecodes decodes the concatenated chunks with ffprobe, when
// present, and checks the frame count and that no error is reported.
func ffprobeDecodes(t *testing.T, codec Codec, stream []byte, frames int) {
	t.Helper()
	bin, err := exec.LookPath("ffprobe")
	if err != nil {
		t.Log("ffprobe not installed: skipping the decode assertion")
		return
	}
	f := filepath.Join(t.TempDir(), "out."+string(codec))
	if err := os.WriteFile(f, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	format := "h264"
	if codec == CodecH265 {
		format = "hevc"
	}
	out, err := exec.Command(bin, "-v", "error", "-f", format, "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", f).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v: %s", err, out)
	}
	want := []byte(itoa(frames) + "\n")
	if !bytes.Equal(out, want) {
		t.Fatalf("ffprobe decoded %q, want %q (errors are printed before the count)", out, want)
	}
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// TestLateFirstReportRedatesChunk: the capture's first sender report
// reaches the drone after its first frames were dated (RTP and RTCP come
// in on separate sockets, so a report sent first can be read second) but
// before their chunk is complete: those frames take the report's times,
// as if it had come first — no chunk estimated, no clock jump — and the
// frames after keep them.
func TestLateFirstReportRedatesChunk(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	sr := -1
	for i, p := range c.pkts {
		if p.Kind == replay.RTCP {
			sr = i
			break
		}
	}
	if sr < 0 || sr > firstRTP(c.pkts) {
		t.Fatalf("the capture's first report is packet %d, its first RTP %d", sr, firstRTP(c.pkts))
	}
	var pkts []replay.Packet
	pkts = append(pkts, c.pkts[:sr]...)
	// After the third frame's first packet: two frames are dated.
	frames, at := 0, -1
	var ts uint32
	for i := sr + 1; i < len(c.pkts) && at < 0; i++ {
		p := c.pkts[i]
		if p.Kind != replay.RTP {
			continue
		}
		if t := binary.BigEndian.Uint32(p.Payload[4:8]); frames == 0 || t != ts {
			frames, ts = frames+1, t
			if frames == 3 {
				at = i
			}
		}
	}
	pkts = append(pkts, c.pkts[sr+1:at+1]...)
	late := c.pkts[sr]
	late.Time = c.pkts[at].Time
	pkts = append(pkts, late)
	pkts = append(pkts, c.pkts[at+1:]...)

	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	feed(t, d, pkts)
	if st := d.c.snapshot(); st.ClockJumps != 0 {
		t.Fatalf("%d clock jumps", st.ClockJumps)
	}
	checkFrames(t, c, decodeAll(t, sink.snapshot()), expectedPTS(c.pkts))
}
