package mavlink

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/minimal"
)

// maxDatagram is the largest UDP payload.
const maxDatagram = 65535

// readUDP takes datagrams from c until it is closed. A datagram carries
// whole frames: bytes left after its last frame are garbage.
func (in *Intake) readUDP(c *net.UDPConn, stop <-chan struct{}) {
	buf := make([]byte, maxDatagram)
	for {
		n, err := c.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			// A connected socket reports ICMP errors (the server is not up yet).
			in.c.readErrors.Add(1)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		in.c.datagrams.Add(1)
		recv := in.cfg.Now().UnixNano()
		if used := in.consume(buf[:n], recv); used < n {
			in.c.garbageBytes.Add(uint64(n - used))
			in.c.truncated.Add(1)
		}
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
	c.SetReadBuffer(in.cfg.SocketBuffer)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); in.readUDP(c, stop) }()
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
