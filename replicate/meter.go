package replicate

import (
	"net"
	"time"

	"github.com/nats-io/nats.go"
)

// Dialer returns a dialer for the central connection (ConnConfig.Dialer,
// nats.SetCustomDialer) whose connections charge the uplink with every
// byte written to them — TLS records, NATS protocol lines, headers and
// compressed packs, as they leave for the link. base dials (nil: a
// net.Dialer). From then on the cap is charged on the wire (Uplink).
//
// The meter only counts and charges; it does not block the writer. A
// write blocked at the socket would hold nats.go's connection lock (its
// pings and acks with it), and data queued there is past every priority:
// the live lane's value would wait behind a video pack already written.
// So the pacing stays with the waiters, which reserve before they hand
// bytes to the connection, and the meter settles the reservations
// against what is really written.
func (u *Uplink) Dialer(base nats.CustomDialer) nats.CustomDialer {
	if base == nil {
		base = &net.Dialer{Timeout: 2 * time.Second}
	}
	if u == nil {
		return base
	}
	u.metered.Store(true)
	return meterDialer{u: u, base: base}
}

type meterDialer struct {
	u    *Uplink
	base nats.CustomDialer
}

func (d meterDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.base.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return meterConn{Conn: c, u: d.u}, nil
}

// meterConn is a connection whose writes are charged to an uplink.
type meterConn struct {
	net.Conn
	u *Uplink
}

func (c meterConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.u.wrote(n)
	}
	return n, err
}
