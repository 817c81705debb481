package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edge-agent/edge-agent/ingest/guard"
)

// Handler serves /metrics (Prometheus), /healthz, /readyz, /status (JSON), the
// status page at / and, when enabled, /debug/pprof.
func (a *Agent) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&statusCollector{a: a})
	mux := http.NewServeMux()
	// Uncompressed, so that the redactor sees the text.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if p := a.healthProblem(time.Now()); p != "" {
			http.Error(w, p, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	// Ready: healthy, and the centre reached and not away for longer than
	// central.unready_after (readiness.go).
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		p := a.healthProblem(now)
		if p == "" {
			p = a.readinessProblem(now)
		}
		if p != "" {
			http.Error(w, p, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(a.Status())
	})
	return a.operatorRoutes(mux)
}

// healthProblem says why the agent itself is unhealthy ("" when it is
// healthy): its store, its intakes, its replication.
func (a *Agent) healthProblem(now time.Time) string {
	if err := a.store.Err(); err != nil {
		return "store: " + err.Error()
	}
	if st := a.store.Stats(); st.BelowFloor {
		return fmt.Sprintf("store: refusing appends: %d bytes free, below store.min_free_bytes %d", st.FreeBytes, st.MinFreeBytes)
	}
	if p := a.telemetryProblems(now); len(p) > 0 {
		return "telemetry: " + strings.Join(p, "; ")
	}
	if p := a.replicationProblems(now); len(p) > 0 {
		return "sync: " + strings.Join(p, "; ")
	}
	return ""
}

// replicationStall is how long a stream may go without a commit, with
// errors and events waiting, before /healthz fails.
const replicationStall = time.Minute

// replicationProblems says which streams cannot replicate: stopped ones,
// and ones failing for replicationStall while the centre is reachable (an
// uplink outage is the edge's normal life, shown in /status, not a
// failure of the agent).
func (a *Agent) replicationProblems(now time.Time) []string {
	nc := a.centralConn()
	reachable := nc != nil && (!a.outage.State().Down || nc.IsClosed())
	var out []string
	for _, s := range a.replStats() {
		if p := s.Problem(now, replicationStall); p != "" && (s.Stopped != "" || reachable) {
			out = append(out, p)
		}
	}
	return out
}

// Bounds of the HTTP endpoints: at most maxHTTPConns connections are
// open (a new one closes the one that has waited longest for a request:
// connLimiter), an idle keep-alive connection is closed after
// httpIdleTimeout, headers are at most httpMaxHeaderBytes.
const (
	maxHTTPConns       = 64
	httpIdleTimeout    = 30 * time.Second
	httpMaxHeaderBytes = 16 << 10
)

// serveHTTP serves h on ln within the bounds above, until the returned
// server is shut down.
func serveHTTP(ln net.Listener, h http.Handler) *http.Server {
	srv := newHTTPServer(serving(h))
	srv.ConnContext = connContext
	go srv.Serve(newConnLimiter(ln, maxHTTPConns))
	return srv
}

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpHeaderTimeout,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
	}
}

// warnOpenBinds warns at start of listeners without authentication that
// are bound to every interface: pprof on the HTTP listener, the MQTT
// listener.
func (a *Agent) warnOpenBinds() {
	if a.cfg.HTTP.Pprof && everyInterface(a.cfg.HTTP.Listen) {
		a.log.Warn("http: /debug/pprof is served on every interface without authentication: bind http.listen to 127.0.0.1 or turn http.pprof off",
			"listen", a.cfg.HTTP.Listen)
	}
	if everyInterface(a.cfg.Telemetry.Listen) {
		a.log.Warn("telemetry: the MQTT listener takes any client on every interface (no authentication, no TLS): bind telemetry.listen to the drones' link",
			"listen", a.cfg.Telemetry.Listen)
	}
}

// everyInterface reports whether HOST:PORT binds every interface (no
// host, 0.0.0.0, ::).
func everyInterface(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return host == "" || (err == nil && ip.IsUnspecified())
}

// newConnLimiter bounds the open HTTP connections so that a slowloris
// cannot starve a probe (guard.Limiter): when max are open, the next
// connection is accepted by closing the one that has waited longest for
// a request — one that sends its headers a byte at a time, an idle
// keep-alive — once it has waited evictAfter, never one whose request is
// being served; until then the newcomer waits in the kernel's accept
// queue. Hundreds of connections that never finish a request, reopened
// as they close, so churn through their own slots (64 every evictAfter)
// while a probe's connection, which sends its request at once, is
// served: /healthz keeps answering. (A limit that only makes new
// connections wait, as a LimitListener does, leaves the probe queued
// behind the attack until the header timeout frees slots.)
func newConnLimiter(ln net.Listener, max int) *guard.Limiter {
	return guard.NewLimiter(ln, guard.LimiterConfig{Max: max, EvictAfter: evictAfter, WaitForRoom: true})
}

// evictAfter is how long a connection must have waited for a request
// before a newcomer may take its slot.
const evictAfter = 100 * time.Millisecond

type connKey struct{}

// connContext puts the limited connection in each request's context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*guard.Conn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// serving marks each request's connection active while h runs: it is
// never evicted meanwhile.
func serving(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gc, ok := r.Context().Value(connKey{}).(*guard.Conn); ok {
			defer gc.Active()()
		}
		h.ServeHTTP(w, r)
	})
}

// httpHeaderTimeout is how long a connection may take to send a request's
// headers (a slowloris is cut after it, and earlier under the limit).
const httpHeaderTimeout = 5 * time.Second
