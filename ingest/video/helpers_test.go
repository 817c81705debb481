package video

import (
	"bufio"
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
	"github.com/edge-agent/edge-agent/watermark"
)

// recordSink is an in-test Appender: it keeps every event, in order.
type recordSink struct {
	mu     sync.Mutex
	events []localstream.Event
	// fail, when set, makes Append fail for events whose index it returns true for.
	fail func(i int) bool
	n    int
}

func (s *recordSink) Append(ctx context.Context, ev localstream.Event, _ ...localstream.AppendOption) (localstream.Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.n
	s.n++
	if s.fail != nil && s.fail(i) {
		return localstream.Position{}, context.DeadlineExceeded
	}
	ev.Payload = append([]byte(nil), ev.Payload...)
	s.events = append(s.events, ev)
	return localstream.Position{Offset: uint64(len(s.events) - 1)}, nil
}

func (s *recordSink) snapshot() []localstream.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]localstream.Event(nil), s.events...)
}

// recordMarks is an in-test Marks.
type recordMarks struct {
	mu     sync.Mutex
	notes  []int64
	pos    []localstream.Position
	closed []string
}

func (m *recordMarks) Admit(string, int64, int64) watermark.Admission { return watermark.Admission{} }
func (m *recordMarks) NoteAdmitted(w string, a watermark.Admission, t int64, p localstream.Position) error {
	t = a.Mark(t)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.notes = append(m.notes, t)
	m.pos = append(m.pos, p)
	return nil
}
func (m *recordMarks) CloseWriter(w string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = append(m.closed, w)
	return nil
}

func testdata(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", name)
}

// capture is a test capture with the encoder's view of its frames.
type capture struct {
	name   string
	codec  Codec
	pkts   []replay.Packet
	port   uint16
	fmtp   string
	frames []expFrame
}

type expFrame struct {
	key  bool
	size int
}

func loadCapture(t testing.TB, name string, codec Codec) capture {
	t.Helper()
	all, _, err := replay.ReadFile(testdata(name + ".pcap"))
	if err != nil {
		t.Fatal(err)
	}
	pkts, port, _ := replay.Select(all)
	sdp, err := os.ReadFile(testdata(name + ".sdp"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseSDP(string(sdp))
	if err != nil || v.Codec != codec {
		t.Fatalf("sdp: %+v %v", v, err)
	}
	c := capture{name: name, codec: codec, pkts: pkts, port: port, fmtp: v.Fmtp}
	f, err := os.Open(testdata(name + ".frames.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), ",")
		size, _ := strconv.Atoi(parts[2])
		c.frames = append(c.frames, expFrame{key: parts[1] == "1", size: size})
	}
	return c
}

// expectedPTS computes, independently of the package, the wall-clock PTS of
// each frame of a capture: the RTP timestamps in order of first appearance,
// mapped through the last Sender Report seen before the frame's last packet.
func expectedPTS(pkts []replay.Packet) []int64 {
	var out []int64
	var srNs int64
	var srRTP uint32
	haveSR := false
	var cur uint32
	have := false
	flush := func() {
		if have && haveSR {
			out = append(out, srNs+int64(int32(cur-srRTP))*1000000000/90000)
		}
	}
	for _, p := range pkts {
		b := p.Payload
		if p.Kind == replay.RTCP {
			if b[1] == 200 {
				ntp := binary.BigEndian.Uint64(b[8:16])
				sec := int64(ntp>>32) - 2208988800
				frac := int64((ntp & 0xffffffff) * 1000000000 >> 32)
				srNs, srRTP, haveSR = sec*1000000000+frac, binary.BigEndian.Uint32(b[16:20]), true
			}
			continue
		}
		ts := binary.BigEndian.Uint32(b[4:8])
		if have && ts != cur {
			flush()
		}
		cur, have = ts, true
		if b[1]&0x80 != 0 { // marker: frame ends here
			flush()
			have = false
		}
	}
	flush()
	return out
}

// feed runs packets through a drone without sockets, arrival = capture time.
func feed(t testing.TB, d *drone, pkts []replay.Packet) {
	t.Helper()
	ctx := context.Background()
	var last time.Time
	for _, p := range pkts {
		b := append([]byte(nil), p.Payload...)
		var err error
		if p.Kind == replay.RTCP {
			err = d.rtcpPacket(ctx, b, p.Time)
		} else {
			err = d.rtp(ctx, b, p.Time)
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Time.Sub(last) > 5*time.Millisecond {
			if err := d.tick(ctx, p.Time); err != nil {
				t.Fatal(err)
			}
			last = p.Time
		}
	}
	if err := d.close(ctx); err != nil {
		t.Fatal(err)
	}
}

// decoded is the chunks of a drone decoded and flattened to frames.
type decoded struct {
	chunks []*Chunk
	events []localstream.Event
	frames []FrameInfo
	data   [][]byte
	stream []byte
}

func decodeAll(t testing.TB, evs []localstream.Event) decoded {
	t.Helper()
	var d decoded
	for _, ev := range evs {
		if ev.Flags.Has(localstream.FlagRaw) {
			continue
		}
		c, err := DecodeChunk(ev)
		if err != nil {
			t.Fatalf("chunk %d: %v", len(d.chunks), err)
		}
		d.chunks = append(d.chunks, c)
		d.events = append(d.events, ev)
		for i, f := range c.Frames {
			d.frames = append(d.frames, f)
			d.data = append(d.data, c.FrameData(i))
		}
		d.stream = append(d.stream, c.Payload...)
	}
	return d
}

func testConfig() Config {
	c := NewDefaultConfig()
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

var netipLoopback = netip.MustParseAddrPort("127.0.0.1:40000")
