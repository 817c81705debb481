package mavlink

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/minimal"

	"github.com/edge-agent/edge-agent/ingest/udpsock"
)

// A UDP socket is read with recvmmsg, up to udpReadBatch datagrams a call
// into buffers of udpDatagramMax bytes each (64 KiB a socket in all): a
// MAVLink datagram is a few frames (mavlink-router packs them up to the
// link's MTU); a longer one is cut there (counted in Truncated, its
// frames in the first udpDatagramMax bytes kept).
const (
	udpReadBatch   = 8
	udpDatagramMax = 8 << 10
)

// readUDP takes datagrams from c until it is closed. A datagram carries
// whole frames: bytes left after its last frame are garbage. The
// kernel's count of datagrams dropped at c (its receive buffer full) is
// kept in drops.
func (in *Intake) readUDP(c *net.UDPConn, drops *atomic.Int64, conn uint64, stop <-chan struct{}) {
	r := udpsock.NewReader(c, udpReadBatch, udpDatagramMax)
	for {
		msgs, ok := r.Read(stop, 10*time.Millisecond, func(error) { in.c.readErrors.Add(1) })
		if !ok {
			return
		}
		recv := in.cfg.Now().UnixNano()
		in.c.datagrams.Add(uint64(len(msgs)))
		in.mu.Lock()
		for i := range msgs {
			m := &msgs[i]
			if d := udpsock.KernelDrops(m.OOB[:m.NN]); d >= 0 {
				drops.Store(d)
			}
			b := m.Buffers[0][:m.N]
			src := source{conn: conn}
			if ua, ok := m.Addr.(*net.UDPAddr); ok {
				src.addr = ua.AddrPort()
			}
			if used := in.consumeLocked(b, recv, src); used < len(b) || m.Flags&syscall.MSG_TRUNC != 0 {
				in.c.garbageBytes.Add(uint64(len(b) - used))
				in.c.truncated.Add(1)
			}
		}
		in.flushNow()
		in.mu.Unlock()
	}
}

// connectUDP is a client of a UDP server endpoint: it sends a HEARTBEAT
// every HeartbeatInterval (a router sends its traffic to the clients it
// has heard from) and reads what comes back, until ctx ends.
func (in *Intake) connectUDP(ctx context.Context, addr string) {
	var c *net.UDPConn
	for c == nil {
		ra, err := net.ResolveUDPAddr("udp", addr)
		if err == nil {
			c, err = net.DialUDP("udp", nil, ra)
		}
		if err != nil {
			in.c.readErrors.Add(1)
			in.cfg.Logger.Warn("mavlink: udp_connect", "addr", addr, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
	udpsock.Tune(c, in.cfg.SocketBuffer)
	drops := in.kernelDrops.add()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); in.readUDP(c, drops, in.newConnID(), stop) }()
	t := time.NewTicker(in.cfg.HeartbeatInterval)
	defer t.Stop()
	var seq uint8
	for {
		if hb, err := in.cfg.Dialect.Encode(false, seq, in.cfg.SystemID, 0, &minimal.MessageHeartbeat{
			Type: minimal.MAV_TYPE_GCS, Autopilot: minimal.MAV_AUTOPILOT_INVALID, MavlinkVersion: 3}); err == nil {
			c.Write(hb)
			seq++
		}
		select {
		case <-ctx.Done():
			close(stop)
			c.Close()
			<-done
			return
		case <-t.C:
		}
	}
}

// socketDrops are the kernel's drop counts of the intake's UDP sockets
// (each cumulative, as SO_RXQ_OVFL reports it).
type socketDrops struct {
	mu    sync.Mutex
	socks []*atomic.Int64
}

// add registers a socket and returns its count.
func (s *socketDrops) add() *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := new(atomic.Int64)
	s.socks = append(s.socks, c)
	return c
}

// total is the datagrams dropped at every socket so far.
func (s *socketDrops) total() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.socks {
		n += c.Load()
	}
	return uint64(n)
}
