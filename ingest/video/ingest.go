package video

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edge-agent/edge-agent/ingest/udpsock"
)

// Ingest receives RTP/RTCP over UDP and appends each drone's video to the
// sink as chunks. New starts nothing; Run listens and blocks until its ctx
// ends. Stats is safe for concurrent use.
type Ingest struct {
	cfg   Config
	sink  Appender
	marks Marks
	log   *slog.Logger
	now   func() time.Time

	rc receiveCounters

	mu     sync.Mutex // guards router, counters map, drones
	router *router
	// counters of drone ids seen (kept across restarts of a drone), bounded
	// by boundCounters; folded sums the counters of ids dropped from it.
	counters map[string]*droneCounters
	folded   DroneStats

	ready      chan struct{}
	rtpAddr    net.Addr
	rtcpAddr   net.Addr
	sockBuf    atomic.Int64
	dropsBySck [2]atomic.Int64

	wg      sync.WaitGroup // drone goroutines
	running atomic.Bool

	// sources are the RTSP sources, one goroutine each while Run runs.
	sources []*source
}

// New checks cfg (defaults applied) and returns an Ingest that appends to sink.
// It starts nothing.
func New(cfg Config, sink Sink) (*Ingest, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink.Stream == nil {
		return nil, fmt.Errorf("%w: sink needs a stream", ErrConfig)
	}
	in := &Ingest{
		cfg: cfg, sink: sink.Stream, marks: sink.Marks, log: cfg.Logger, now: cfg.Now,
		counters: map[string]*droneCounters{},
		ready:    make(chan struct{}),
	}
	for i := range in.cfg.Sources {
		in.sources = append(in.sources, newSource(in, &in.cfg.Sources[i]))
	}
	return in, nil
}

// Ready is closed once Run has bound its sockets.
func (in *Ingest) Ready() <-chan struct{} { return in.ready }

// Addr returns the bound RTP address (after Ready).
func (in *Ingest) Addr() net.Addr { return in.rtpAddr }

// RTCPAddr returns the bound RTCP address, nil when muxed only (after Ready).
func (in *Ingest) RTCPAddr() net.Addr { return in.rtcpAddr }

// Run binds the sockets, receives until ctx ends, then flushes every
// drone's complete frames (bounded by 5s) and returns once every goroutine
// it started has stopped: ctx is the one way to stop it. An Ingest runs
// once.
func (in *Ingest) Run(ctx context.Context) error {
	if !in.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrClosed)
	}
	if ctx.Err() != nil {
		return nil
	}
	rtpConn, rtcpConn, err := in.listen()
	if err != nil {
		return err
	}
	// The drones stop after the readers and sources (pipeline order):
	// they flush what those queued, and no packet read while the readers
	// stop starts a drone again after its flush (its chunks would race
	// the first drone's to the store). So their context is not ctx.
	drones, stopDrones := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDrones()
	in.mu.Lock()
	in.router = newRouter(&in.cfg, &in.rc, func(id string, dr *droneRun) {
		in.startDrone(drones, id, dr)
	})
	in.mu.Unlock()
	in.rtpAddr = rtpConn.LocalAddr()
	if rtcpConn != nil {
		in.rtcpAddr = rtcpConn.LocalAddr()
	}
	close(in.ready)

	var readers sync.WaitGroup
	conns := []*net.UDPConn{rtpConn}
	if rtcpConn != nil {
		conns = append(conns, rtcpConn)
	}
	readers.Add(1)
	stopReport := make(chan struct{})
	go func() {
		defer readers.Done()
		in.reportDrops(stopReport)
	}()
	stopping := make(chan struct{})
	for i, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			in.read(c, i, stopping)
		}()
	}
	// RTSP sources: one pipeline, two ways in. They stop with the readers,
	// before the drones flush.
	for _, s := range in.sources {
		readers.Go(func() { s.run(ctx) })
	}
	<-ctx.Done()
	close(stopping)
	for _, c := range conns {
		c.Close()
	}
	close(stopReport)
	readers.Wait()
	stopDrones() // drones flush and close
	in.wg.Wait()
	return nil
}

// listen binds the RTP socket and, unless muxed, the RTCP socket on port+1
// (with an ephemeral RTP port, it retries until port+1 is free too).
func (in *Ingest) listen() (*net.UDPConn, *net.UDPConn, error) {
	ua, err := net.ResolveUDPAddr("udp", in.cfg.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: listen: %v", ErrConfig, err)
	}
	for attempt := 0; ; attempt++ {
		rtpConn, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, nil, fmt.Errorf("video: listen rtp %s: %w", ua, err)
		}
		in.sockBuf.Store(int64(udpsock.Tune(rtpConn, in.cfg.SocketBuffer)))
		if in.cfg.RTCPListen == "mux" {
			return rtpConn, nil, nil
		}
		var ra *net.UDPAddr
		if in.cfg.RTCPListen != "" {
			ra, _ = net.ResolveUDPAddr("udp", in.cfg.RTCPListen)
		} else {
			local := rtpConn.LocalAddr().(*net.UDPAddr)
			ra = &net.UDPAddr{IP: local.IP, Port: local.Port + 1, Zone: local.Zone}
		}
		rtcpConn, err := net.ListenUDP("udp", ra)
		if err == nil {
			udpsock.Tune(rtcpConn, 1<<20)
			return rtpConn, rtcpConn, nil
		}
		rtpConn.Close()
		if ua.Port != 0 || in.cfg.RTCPListen != "" || attempt > 20 {
			return nil, nil, fmt.Errorf("video: listen rtcp %s: %w", ra, err)
		}
	}
}

// read receives datagrams in batches and routes them. sock 0 = RTP, 1 = RTCP.
func (in *Ingest) read(c *net.UDPConn, sock int, stopping <-chan struct{}) {
	r := udpsock.NewReader(c, in.cfg.ReadBatch, in.cfg.MaxPacketSize+1)
	for {
		msgs, ok := r.Read(stopping, time.Millisecond, nil)
		if !ok {
			return
		}
		n := len(msgs)
		now := in.now()
		in.rc.readBatches.Add(1)
		// Garbage (not RTP, not allowed, oversize) is screened out first;
		// the router copies only the datagrams it queues or holds, so
		// memory follows what is queued (queue_bytes), not what arrives.
		for i := 0; i < n; i++ {
			m := &msgs[i]
			in.rc.datagrams.Add(1)
			in.rc.bytes.Add(uint64(m.N))
			if d := udpsock.KernelDrops(m.OOB[:m.NN]); d >= 0 {
				in.dropsBySck[sock].Store(d)
			}
			ua, ok := m.Addr.(*net.UDPAddr)
			switch {
			case m.N > in.cfg.MaxPacketSize:
				in.rc.oversize.Add(1)
				m.N = -1
			case !ok || !in.router.screen(m.Buffers[0][:m.N], ua.AddrPort()):
				m.N = -1
			}
		}
		in.mu.Lock()
		for i := 0; i < n; i++ {
			m := &msgs[i]
			if m.N < 0 {
				continue
			}
			ua := m.Addr.(*net.UDPAddr)
			in.router.dispatch(m.Buffers[0][:m.N], ua.AddrPort(), now, sock == 1)
		}
		in.mu.Unlock()
	}
}

// enqueueSource queues a pulled packet for its source's drone (the same
// bounded queue as pushed RTP, drops counted), starting the drone when it
// is not running.
func (in *Ingest) enqueueSource(conn *sourceConn, it item) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.router.enqueue(in.router.startSource(conn.dc, it.arrival), it)
}

// tickInterval is how often a drone runs its timers.
func (in *Ingest) tickInterval() time.Duration {
	t := in.cfg.ReorderMaxWait / 4
	if t < 10*time.Millisecond {
		t = 10 * time.Millisecond
	}
	return t
}

// startDrone creates dr's drone and starts its goroutine. in.mu is held.
func (in *Ingest) startDrone(ctx context.Context, id string, dr *droneRun) {
	c := in.counters[id] // cumulative across restarts of the drone
	if c == nil {
		in.boundCounters()
		c = &droneCounters{}
		in.counters[id] = c
	}
	dr.d = newDrone(id, &in.cfg, dr.dc, in.sink, in.marks, in.now, c)
	dr.ch, dr.evict = make(chan item, in.cfg.QueueDepth), make(chan struct{})
	in.rc.dronesStarted.Add(1)
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		in.runDrone(ctx, dr)
	}()
}

// maxCountersFactor × max_drones bounds the drone ids whose counters are
// kept; beyond it, the counters of a closed drone are folded into the totals.
const maxCountersFactor = 4

// boundCounters folds one closed drone's counters into the totals when the
// map is full. in.mu is held.
func (in *Ingest) boundCounters() {
	if len(in.counters) < maxCountersFactor*in.cfg.MaxDrones {
		return
	}
	for id, c := range in.counters {
		if _, running := in.router.byID.Peek(id); !running {
			in.folded.add(c.snapshot())
			delete(in.counters, id)
			return
		}
	}
}

// runDrone is a drone's goroutine: packets, timers, idle timeout, shutdown.
func (in *Ingest) runDrone(ctx context.Context, dr *droneRun) {
	d := dr.d
	t := time.NewTicker(in.tickInterval())
	defer t.Stop()
	handle := func(ctx context.Context, it item) error {
		in.router.queued.Add(-int64(len(it.b)))
		if it.conn != nil && it.conn != d.conn {
			d.reconnect(it.conn)
		}
		if it.rtcp {
			return d.rtcpPacket(ctx, it.b, it.arrival)
		}
		d.queueDropped = it.dropped
		return d.rtp(ctx, it.b, it.arrival)
	}
	for {
		var err error
		select {
		case it := <-dr.ch:
			err = handle(ctx, it)
		case <-t.C:
			now := in.now()
			err = d.tick(ctx, now)
			if now.Sub(d.lastSeen) >= in.cfg.SessionTimeout && len(dr.ch) == 0 {
				in.mu.Lock()
				in.router.remove(dr)
				in.mu.Unlock()
				in.finish(context.WithoutCancel(ctx), dr, handle)
				return
			}
		case <-dr.evict: // the router took the slot back (already removed)
			in.finish(context.WithoutCancel(ctx), dr, handle)
			return
		case <-ctx.Done():
			in.mu.Lock()
			if in.router != nil {
				in.router.remove(dr)
			}
			in.mu.Unlock()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			in.finish(fctx, dr, handle)
			cancel()
			return
		}
		if err != nil && ctx.Err() == nil {
			in.log.Debug("video: append failed", "drone", d.id, "err", err)
		}
	}
}

// finish processes what is queued for a removed drone, then closes it.
func (in *Ingest) finish(ctx context.Context, dr *droneRun, handle func(context.Context, item) error) {
	for {
		select {
		case it := <-dr.ch:
			_ = handle(ctx, it)
			continue
		default:
		}
		break
	}
	if err := dr.d.close(ctx); err != nil {
		in.log.Warn("video: closing drone", "drone", dr.d.id, "err", err)
	}
	in.rc.dronesClosed.Add(1)
}

// Stats returns a snapshot of the counters.
func (in *Ingest) Stats() Stats {
	s := Stats{
		Datagrams: in.rc.datagrams.Load(), Bytes: in.rc.bytes.Load(), ReadBatches: in.rc.readBatches.Load(),
		Oversize: in.rc.oversize.Load(), NotRTP: in.rc.notRTP.Load(),
		Rejected: in.rc.rejected.Load(), Unverified: in.rc.unverified.Load(),
		TooManyDrones: in.rc.tooManyDrones.Load(), UnknownRTCP: in.rc.unknownRTCP.Load(),
		Evicted:       in.rc.evicted.Load(),
		KernelDrops:   uint64(in.dropsBySck[0].Load() + in.dropsBySck[1].Load()),
		DronesStarted: in.rc.dronesStarted.Load(), DronesClosed: in.rc.dronesClosed.Load(),
		SocketBuffer: int(in.sockBuf.Load()),
		PerDrone:     map[string]DroneStats{},
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.router != nil {
		s.Drones = in.router.byID.Len()
	}
	s.DroneStats.add(in.folded)
	for id, c := range in.counters {
		ds := c.snapshot()
		s.PerDrone[id] = ds
		s.DroneStats.add(ds)
	}
	for _, src := range in.sources {
		s.Sources = append(s.Sources, src.state.snapshot())
	}
	return s
}
