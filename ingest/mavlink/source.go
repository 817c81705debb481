package mavlink

import (
	"net/netip"

	"github.com/edge-agent/edge-agent/ingest/guard"
)

// MAVLink has no authentication but signing: any host that can reach the
// intake can send frames with a drone's system id. As video binds an SSRC
// to its source (RFC 3550 §8.2), with the same guard.Binding, a system
// id is bound to the source of its first frame — a UDP sender's address and port, a TCP connection, a
// tlog stream — and frames with that system id from any other source are
// dropped (counted spoofed, per drone) until the bound source has been
// silent for Config.RebindAfter, or its connection closed: then the next
// source takes the system id over (counted rebinds). A flood with a good
// drone's system id neither enters its stream nor keeps its slot alive;
// a drone that moves (a new port after a restart, a TCP link redialled, a
// failover to its second radio) is taken after the silence. Every drone
// behind one mavlink-router shares the router's source.
//
// source is where a frame came from.
type source struct {
	addr netip.AddrPort // the UDP sender (zero on a stream)
	conn uint64         // the socket or connection, numbered by the intake
}

// newConnID numbers a socket or connection.
func (in *Intake) newConnID() uint64 { return in.conns.Add(1) }

// boundTo reports whether a frame of d from src, received at recv, is
// d's (guard.Binding): src is the bound source, or takes it over (none
// yet, released, or silent for RebindAfter). in.mu is held.
func (in *Intake) boundTo(d *drone, src source, recv int64) bool {
	switch d.bind.Admit(src, recv, in.cfg.RebindAfter, true) {
	case guard.Spoofed:
		return false
	case guard.Rebound:
		d.st.Rebinds++
		in.c.rebinds.Add(1)
	}
	return true
}

// releaseSource lets the drones bound to a closed connection be taken
// over at once.
func (in *Intake) releaseSource(src source) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, d := range in.slots.All() {
		d.bind.Release(src)
	}
}
