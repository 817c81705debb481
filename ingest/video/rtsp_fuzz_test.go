package video

import (
	"context"
	"encoding/binary"
	"os"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/description"
	"github.com/bluenviron/gortsplib/v4/pkg/sdp"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// FuzzSourceSession feeds what an RTSP server decides — its session
// description (whatever gortsplib accepts of it) and the packets of its
// connections — through the code this package adds for pulled sources:
// videoMedia (codec, payload type and parameter sets from the SDP) and a
// drone that starts a session at each new connection. The stream is
// records of [kind][len uint16 BE][bytes]: kind 0 starts a new
// connection, 1 is RTCP, else RTP. Nothing may panic; every chunk
// decodes, and the first after each new connection is flagged
// discontinuity and starts with a keyframe.
func FuzzSourceSession(f *testing.F) {
	for _, name := range []string{"h264", "h265"} {
		sdpText, err := os.ReadFile(testdata(name + ".sdp"))
		if err != nil {
			f.Fatal(err)
		}
		all, _, err := replay.ReadFile(testdata(name + ".pcap"))
		if err != nil {
			f.Fatal(err)
		}
		var stream []byte
		for i, p := range all {
			if i == 40 {
				stream = append(stream, 0, 0, 0) // reconnect
			}
			if i > 80 {
				break
			}
			kind := byte(2)
			if p.Kind == replay.RTCP {
				kind = 1
			}
			stream = binary.BigEndian.AppendUint16(append(stream, kind), uint16(len(p.Payload)))
			stream = append(stream, p.Payload...)
		}
		f.Add(string(sdpText), stream)
	}
	f.Add("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H265/90000\r\na=fmtp:96 sprop-vps=QAEMAf//AWAAAAMAkAAAAwAAAwA/ugJA; sprop-sps=QgEBAWAAAAMAkAAAAwAAAwA/oAoIDxZbpKTC//AAEAAQEAAAAwAQAAADAeCA; sprop-pps=RAHBcrRiQA==\r\n", []byte{0})
	f.Fuzz(func(t *testing.T, sdpText string, stream []byte) {
		var sd sdp.SessionDescription
		if err := sd.Unmarshal([]byte(sdpText)); err != nil {
			return
		}
		var desc description.Session
		if err := desc.Unmarshal(&sd); err != nil {
			return
		}
		_, _, dc, err := videoMedia(&desc, "fz")
		if err != nil {
			return
		}
		cfg := testConfig()
		sink := &recordSink{}
		d := newDrone("fz", &cfg, dc, sink, nil, time.Now, nil)
		ctx := context.Background()
		now := time.Unix(1_800_000_000, 0)
		conn := &sourceConn{dc: dc}
		conns := 1
		for len(stream) >= 3 {
			kind, n := stream[0], int(binary.BigEndian.Uint16(stream[1:3]))
			stream = stream[3:]
			if kind == 0 {
				conn, conns = &sourceConn{dc: dc}, conns+1
				continue
			}
			n = min(n, len(stream))
			b := append([]byte(nil), stream[:n]...)
			stream = stream[n:]
			now = now.Add(time.Millisecond)
			if conn != d.conn {
				d.reconnect(conn)
			}
			if kind == 1 {
				_ = d.rtcpPacket(ctx, b, now)
			} else {
				_ = d.rtp(ctx, b, now)
			}
		}
		_ = d.close(ctx)
		for i, ev := range sink.snapshot() {
			if ev.Flags.Has(localstream.FlagRaw) {
				if _, err := DecodeRawBatch(ev.Payload); err != nil {
					t.Fatal(err)
				}
				continue
			}
			c, err := DecodeChunk(ev)
			if err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
			if c.Codec != dc.Codec {
				t.Fatalf("chunk %d: codec %s, the server described %s", i, c.Codec, dc.Codec)
			}
			if c.Discontinuity && !c.Frames[0].Key {
				t.Fatalf("chunk %d: flagged discontinuity without a keyframe first", i)
			}
		}
		if st := d.c.snapshot(); st.Chunks > 0 && st.Discontinuities == 0 {
			t.Fatalf("%d chunks, none flagged discontinuity (%d connections)", st.Chunks, conns)
		}
	})
}
