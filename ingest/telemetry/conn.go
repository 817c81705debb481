package telemetry

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/mqttwire"
)

// dialBuffered opens tcp/mqtt, ssl/tls/mqtts and ws/wss connections for
// paho, wrapped in a mqttwire.BufferedConn (fewer syscalls: it reads
// through a buffer and coalesces writes).
func dialBuffered(uri *url.URL, o paho.ClientOptions) (net.Conn, error) {
	c, err := dialConn(uri, o)
	if err != nil {
		return nil, err // not a typed nil
	}
	return c, nil
}

// dialConn dials as dialBuffered does.
func dialConn(uri *url.URL, o paho.ClientOptions) (*mqttwire.BufferedConn, error) {
	d := &net.Dialer{Timeout: o.ConnectTimeout}
	var (
		c   net.Conn
		err error
	)
	switch uri.Scheme {
	case "tcp", "mqtt":
		c, err = d.Dial("tcp", uri.Host)
	case "ssl", "tls", "mqtts", "tcps":
		c, err = tls.DialWithDialer(d, "tcp", uri.Host, o.TLSConfig)
	case "ws", "wss": // as paho dials them (netconn.go), without the user info gorilla refuses
		u := *uri
		u.User = nil
		var tc *tls.Config
		if uri.Scheme == "wss" {
			tc = o.TLSConfig
		}
		c, err = paho.NewWebsocket(u.String(), tc, o.ConnectTimeout, o.HTTPHeaders, o.WebsocketOptions)
	default:
		return nil, fmt.Errorf("%w: scheme %q", ErrConfig, uri.Scheme)
	}
	if err != nil {
		return nil, err
	}
	return mqttwire.NewBufferedConn(c), nil
}
