package mavlink

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edge-agent/edge-agent/ingest/droplog"
	"github.com/edge-agent/edge-agent/ingest/guard"
	"github.com/edge-agent/edge-agent/ingest/udpsock"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// Event headers and content type of a stored frame.
const (
	// ContentType is the content type of an event holding one MAVLink
	// frame, byte for byte as received (v1 or v2, signature included).
	ContentType = "application/x-mavlink"
	// HeaderMsgID is the frame's message id, decimal.
	HeaderMsgID = "mavlink-msgid"
	// HeaderCompID is the frame's component id, decimal.
	HeaderCompID = "mavlink-compid"
	// HeaderTlogTime is the receive time a tlog recorded for the frame
	// (Unix µs, decimal), on frames that came in as a tlog stream
	// (Config.TlogListen: `edge-agent replay --tlog`).
	HeaderTlogTime = "mavlink-tlog-us"
)

// Intake receives MAVLink over UDP and TCP and appends each frame that
// passes its checks to the telemetry stream. New starts nothing; Run
// opens the endpoints and blocks until ctx ends (or the store fails), and
// returns once every goroutine it started has stopped. Stats is safe for
// concurrent use.
type Intake struct {
	cfg    Config
	sink   Sink
	signer *signer
	// replay is the signing streams' last timestamps (replay.go); in.mu.
	replay replayGuard
	rates  map[uint32]int64 // msgid → least ns between two kept; -1 drop
	c      counters
	// kernelDrops are the UDP sockets' drop counts (Stats.KernelDrops).
	kernelDrops socketDrops
	// conns numbers the sockets and connections (source.conn).
	conns atomic.Uint64

	// mu serializes the frames of every endpoint: drone state, filters
	// and the append order (one drone's events reach the store in the
	// order they were taken from the sockets).
	mu    sync.Mutex
	slots *guard.Table[uint8, *drone]
	// bySys indexes slots' drones by system id for the frame path
	// (newSlots says why); set on Add and Pin, cleared on Release.
	bySys [256]*drone
	batch batch
	// holes are the components with sequence holes pending (sequence.go);
	// holeTimer is armed while there are any.
	holes     []holeRef
	holeTimer *time.Timer
	ctx       context.Context
	// flushTimer ends a batch's window (armed by its first frame).
	flushTimer *time.Timer

	udp      *net.UDPConn
	tcp      net.Listener
	tlog     net.Listener
	ran      atomic.Bool
	ready    chan struct{}
	fatal    chan error
	inflight sync.WaitGroup
}

// New checks cfg, reads the signing key and returns an intake; it starts nothing.
func New(cfg Config, sink Sink) (*Intake, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink.Stream == nil {
		return nil, fmt.Errorf("%w: sink needs a stream", ErrConfig)
	}
	s, err := loadSigner(cfg.Signing)
	if err != nil {
		return nil, err
	}
	in := &Intake{cfg: cfg, sink: sink, signer: s, rates: map[uint32]int64{},
		ready: make(chan struct{}), fatal: make(chan error, 1), flushTimer: newFlushTimer(), holeTimer: newFlushTimer()}
	in.slots = in.newSlots()
	for name, hz := range cfg.Rates {
		id, _ := cfg.Dialect.ID(name)
		if hz == 0 {
			in.rates[id] = -1
		} else {
			in.rates[id] = int64(float64(time.Second) / hz)
		}
	}
	return in, nil
}

// Bind opens the listening sockets now (Run does it otherwise), so that
// an address in use is reported before anything else starts. The error
// wraps ErrListen.
func (in *Intake) Bind() error {
	if in.cfg.UDPListen != "" && in.udp == nil {
		addr, err := net.ResolveUDPAddr("udp", in.cfg.UDPListen)
		if err != nil {
			return fmt.Errorf("%w: udp_listen %s: %w", ErrListen, in.cfg.UDPListen, err)
		}
		c, err := net.ListenUDP("udp", addr)
		if err != nil {
			return fmt.Errorf("%w: udp_listen: %w", ErrListen, err)
		}
		udpsock.Tune(c, in.cfg.SocketBuffer)
		in.udp = c
	}
	if in.cfg.TlogListen != "" && in.tlog == nil {
		l, err := net.Listen("tcp", in.cfg.TlogListen)
		if err != nil {
			return fmt.Errorf("%w: tlog_listen: %w", ErrListen, err)
		}
		in.tlog = l
	}
	if in.cfg.TCPListen != "" && in.tcp == nil {
		l, err := net.Listen("tcp", in.cfg.TCPListen)
		if err != nil {
			return fmt.Errorf("%w: tcp_listen: %w", ErrListen, err)
		}
		in.tcp = l
	}
	return nil
}

// UDPAddr is the bound UDP server address (nil when off or not bound).
func (in *Intake) UDPAddr() net.Addr {
	if in.udp == nil {
		return nil
	}
	return in.udp.LocalAddr()
}

// TCPAddr is the bound TCP server address (nil when off or not bound).
func (in *Intake) TCPAddr() net.Addr {
	if in.tcp == nil {
		return nil
	}
	return in.tcp.Addr()
}

// TlogAddr is the bound tlog stream server address (nil when off or not bound).
func (in *Intake) TlogAddr() net.Addr {
	if in.tlog == nil {
		return nil
	}
	return in.tlog.Addr()
}

// Ready is closed once every endpoint is open (or being dialled).
func (in *Intake) Ready() <-chan struct{} { return in.ready }

// Run opens the endpoints and takes frames until ctx ends (then it
// returns nil, after the appends it queued are durable) or the store
// fails (an error wrapping ErrStore). A second Run returns ErrClosed.
func (in *Intake) Run(ctx context.Context) error {
	if !in.ran.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrClosed)
	}
	if err := in.Bind(); err != nil {
		return err
	}
	if in.signer != nil && in.sink.Meta != nil {
		if err := in.replay.restore(in.sink.Meta); err != nil {
			return fmt.Errorf("%w: signing timestamps: %w", ErrStore, err)
		}
	}
	// The appends outlive ctx: queued ones become durable after it ends.
	appendCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	in.ctx = appendCtx
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	if in.udp != nil {
		drops := in.kernelDrops.add()
		wg.Go(func() { in.readUDP(in.udp, drops, in.newConnID(), nil) })
	}
	if in.tcp != nil {
		wg.Go(func() { in.acceptTCP(runCtx, in.tcp, in.consume) })
	}
	if in.tlog != nil {
		wg.Go(func() { in.acceptTCP(runCtx, in.tlog, in.consumeTlog) })
	}
	for _, a := range in.cfg.UDPConnect {
		wg.Go(func() { in.connectUDP(runCtx, a) })
	}
	for _, a := range in.cfg.TCPConnect {
		wg.Go(func() { in.dialTCP(runCtx, a) })
	}
	dropStop := make(chan struct{})
	var dropWG sync.WaitGroup
	dropWG.Go(func() { droplog.Run(dropStop, in.drops, in.reportDrops) })
	dropWG.Go(func() { in.flushLoop(dropStop) })
	dropWG.Go(func() { in.holeLoop(dropStop) })
	close(in.ready)
	in.cfg.Logger.Info("mavlink: running", "udp", in.UDPAddr(), "tcp", in.TCPAddr(),
		"udp_connect", in.cfg.UDPConnect, "tcp_connect", in.cfg.TCPConnect, "signing", in.signer != nil)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-in.fatal:
		cancel()
	}
	stop()
	if in.udp != nil {
		in.udp.Close()
	}
	if in.tcp != nil {
		in.tcp.Close()
	}
	if in.tlog != nil {
		in.tlog.Close()
	}
	wg.Wait()
	close(dropStop)
	dropWG.Wait()
	in.mu.Lock()
	in.flush() // the last frames taken
	in.mu.Unlock()
	in.inflight.Wait()
	if runErr == nil {
		select {
		case runErr = <-in.fatal:
		default:
		}
	}
	in.cfg.Logger.Info("mavlink: stopped", "stats", in.Stats())
	return runErr
}

// consume takes the frames at the start of b, received at recv; it
// returns how many bytes it used: the rest is the start of a frame that
// has not wholly arrived (a stream keeps it for the next read; a
// datagram's rest is counted as garbage).
func (in *Intake) consume(b []byte, recv int64, src source) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	defer in.flushNow()
	return in.consumeLocked(b, recv, src)
}

// consumeLocked is consume with in.mu held (and no flush).
func (in *Intake) consumeLocked(b []byte, recv int64, src source) int {
	var f Frame
	used := 0
	for {
		at, ok := in.nextFrame(&f, b, used, 0)
		if !ok {
			return at
		}
		in.frame(&f, recv, 0, src)
		used = at + len(f.Raw)
	}
}

// consumeTlog is consume for a tlog stream: each frame follows its
// recorded receive time (8 bytes).
func (in *Intake) consumeTlog(b []byte, recv int64, src source) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	defer in.flushNow()
	var f Frame
	used := 0
	for {
		at, ok := in.nextFrame(&f, b, used, 8)
		if !ok {
			return at
		}
		us := int64(binary.BigEndian.Uint64(b[at:]))
		if us <= 0 || us > math.MaxInt64/1000 {
			in.c.badTlogTime.Add(1)
			us = 0
		}
		in.frame(&f, recv, us, src)
		used = at + 8 + len(f.Raw)
	}
}

// nextFrame finds the next frame in b from used on, behind a prefix of
// prefixLen bytes (a tlog's receive time; 0: none): it sets f and
// returns where the frame's prefix starts. Where no frame starts it skips a byte (the MAVLink
// parsers' resynchronisation, counted). ok is false when b ends inside
// what may be a frame: at is then where that rest starts (a stream keeps
// it for the next read; a datagram's rest is counted as garbage). The
// frame goes to the caller's f, not to a callback (a Frame behind a func
// value escapes, an allocation a frame: BenchmarkFramePath 1564 -> 1884
// instructions) nor as a result (two copies: 1618).
func (in *Intake) nextFrame(f *Frame, b []byte, used, prefixLen int) (at int, ok bool) {
	for len(b)-used >= prefixLen {
		var res splitResult
		*f, _, res = split(b[used+prefixLen:], in.cfg.Dialect)
		switch res {
		case splitShort:
			return used, false
		case splitFrame:
			return used, true
		case splitBadCRC:
			in.c.badCRC.Add(1)
		case splitUnknown:
			in.c.unknownMessage.Add(1)
		}
		in.c.garbageBytes.Add(1)
		used++
	}
	return used, false
}

// flushNow flushes the batch when there is no window (BatchWindow < 0):
// each datagram's or read's frames are one group. in.mu is held.
func (in *Intake) flushNow() {
	if in.cfg.BatchWindow < 0 {
		in.flush()
	}
}

// frame checks one frame and appends it; tlogUs is the receive time a
// tlog recorded for it (0: none). in.mu is held.
func (in *Intake) frame(f *Frame, recv, tlogUs int64, src source) {
	in.c.frames.Add(1)
	if s := in.signer; s != nil {
		switch {
		case !f.Signed && s.require:
			in.c.unsigned.Add(1)
			return
		case f.Signed && !s.verify(f):
			in.c.badSignature.Add(1)
			return
		case f.Signed && !in.replay.fresh(f, recv, tlogUs):
			in.c.signatureReplayed.Add(1)
			return
		}
	}
	d := in.droneFor(f.SysID, recv)
	if d == nil {
		return
	}
	if !d.bind.Holds(src, recv) && !in.boundTo(d, src, recv) { // Holds: the common case, inlined
		d.st.Spoofed++
		in.c.spoofed.Add(1)
		return
	}
	d.lastActive = max(d.lastActive, recv)
	d.st.Last = recv
	d.st.Frames++
	c := &d.comps[f.CompID]
	var flags localstream.Flags
	if w := c.seq.w; w == nil || !w.TakeNext(uint32(f.Seq), uint32(f.CRC)) {
		var drop bool
		if drop, flags = in.noteSeq(d, f, recv); drop {
			return
		}
	} // else the next number, nothing pending: no flags (the common case, inlined)
	d.st.Vehicle.note(f, recv)
	evTime, mapped := c.eventTime(f, f.info)
	at := recv // a tlog replayed fast is sampled at its own pace
	if tlogUs != 0 {
		at = tlogUs * 1000
	}
	if every, ok := in.rates[f.MsgID]; ok && !d.keep(f, every, at) {
		d.st.Sampled++
		in.c.sampled.Add(1)
		if flags.Has(localstream.FlagDiscontinuity) {
			d.discontinue = true // the next stored event says it
		}
		return
	}
	if d.discontinue {
		flags |= localstream.FlagDiscontinuity
		d.discontinue = false
	}
	if mapped {
		d.st.TimeMapped++
	} else {
		evTime = at // arrival: here, or where the tlog was recorded
		flags |= localstream.FlagEstimatedTime
		d.st.TimeEstimated++
	}
	in.append(d, f, evTime, recv, tlogUs, flags)
}

// keep applies a message's rate: every < 0 drops it, else a frame is
// kept when the last kept of its component and message is every ns old.
func (d *drone) keep(f *Frame, every, recv int64) bool {
	if every < 0 {
		return false
	}
	if d.rateLast == nil {
		d.rateLast = map[uint64]int64{}
	}
	k := uint64(f.CompID)<<32 | uint64(f.MsgID)
	if last, ok := d.rateLast[k]; ok && recv-last < every {
		return false
	}
	d.rateLast[k] = recv
	return true
}

// append admits the frame's event to its writer's marks and adds it to
// the batch. in.mu is held.
func (in *Intake) append(d *drone, f *Frame, evTime, recv, tlogUs int64, flags localstream.Flags) {
	var adm watermark.Admission
	if in.sink.Marks != nil {
		adm = in.sink.Marks.Admit(d.writer, evTime, recv)
		flags |= adm.Flags()
		if adm.Skew != watermark.SkewNone {
			d.st.ClockSkew++
			in.c.clockSkew.Add(1)
		}
		if adm.Late {
			in.c.late.Add(1)
		}
	}
	if flags.Has(localstream.FlagDiscontinuity) {
		d.st.Discontinuities++
	}
	in.add(d, f, evTime, recv, tlogUs, flags, adm)
}

func (in *Intake) fail(err error) {
	select {
	case in.fatal <- fmt.Errorf("%w: %w", ErrStore, err):
	default:
	}
}
