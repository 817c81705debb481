package video

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/bluenviron/gortsplib/v4/pkg/base"
)

// maxRedirects bounds the redirects one connection attempt of a source
// follows. gortsplib's client follows a DESCRIBE's 3xx with no limit (a
// camera that redirects to itself made about 3,700 connections in 3 s
// within one attempt, issue 37 case 8); past the bound the attempt fails
// with ErrRedirects and the source backs off like any failed attempt.
const maxRedirects = 4

// hostGuard holds one connection attempt of a source to its configured
// camera, through gortsplib's client hooks (DialContext, OnResponse,
// OnRequest):
//
//   - it counts the redirects the client follows and refuses to dial past
//     maxRedirects;
//   - it keeps the source's credentials for the configured host. On a
//     redirect gortsplib copies the URL's user and password to whatever
//     host the Location names (Client.doDescribe) and answers that host's
//     401 with them — in clear if it asks for basic. The client has no
//     option against that, but every request passes OnRequest after its
//     Authorization header is set and before it is written, on the
//     connection the dial hook made: on a connection to another host the
//     guard deletes that header, so a redirect elsewhere is still followed
//     (a camera's stream on a media server needs no password of the
//     camera's) and the credentials never leave for it.
//
// "The configured host" is the URL's host name, any port, as Go's HTTP
// client keeps Authorization across a redirect only to the same host.
// The hooks run on the client's caller goroutine; mu guards against any
// other.
type hostGuard struct {
	host   string // the configured URL's host name
	dialer net.Dialer

	mu sync.Mutex
	// redirects counts the 3xx answers with a Location (those gortsplib
	// follows); last is the last Location, its password redacted.
	redirects int
	last      string
	// foreign is set while the connection in use is to another host.
	foreign bool
	// withheld is the other host a request went to without the
	// credentials (empty: none).
	withheld string
}

// newHostGuard guards an attempt to the source URL u.
func newHostGuard(u *base.URL) *hostGuard { return &hostGuard{host: u.Hostname()} }

// onResponse is the client's OnResponse: it counts the redirects gortsplib
// follows (301 to 305 with one Location, as Client.doDescribe does).
func (g *hostGuard) onResponse(res *base.Response) {
	loc := res.Header["Location"]
	if res.StatusCode < base.StatusMovedPermanently || res.StatusCode > base.StatusUseProxy || len(loc) != 1 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.redirects++
	g.last = maskUserinfo(loc[0])
	if u, err := url.Parse(loc[0]); err == nil {
		g.last = u.Redacted()
	}
}

// dial is the client's DialContext: it refuses a connection past
// maxRedirects and notes whether the connection is to the configured host.
func (g *hostGuard) dial(ctx context.Context, network, address string) (net.Conn, error) {
	g.mu.Lock()
	if g.redirects > maxRedirects {
		defer g.mu.Unlock()
		return nil, fmt.Errorf("%w: more than %d in one attempt, the last to %s", ErrRedirects, maxRedirects, g.last)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	g.foreign = !strings.EqualFold(host, g.host)
	g.mu.Unlock()
	return g.dialer.DialContext(ctx, network, address)
}

// onRequest is the client's OnRequest: on a connection to another host it
// removes the Authorization header gortsplib set from the copied
// credentials.
func (g *hostGuard) onRequest(req *base.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.foreign {
		return
	}
	if _, ok := req.Header["Authorization"]; ok {
		delete(req.Header, "Authorization")
		g.withheld = req.URL.Host
	}
}

// configuredHost is the host name the credentials go to.
func (g *hostGuard) configuredHost() string { return g.host }

// withheldFrom is the other host a request went to without the
// source's credentials ("" if none).
func (g *hostGuard) withheldFrom() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.withheld
}
