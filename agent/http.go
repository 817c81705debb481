package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics (Prometheus), /healthz, /status (JSON), the
// status page at / and, when enabled, /debug/pprof.
func (a *Agent) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&statusCollector{a: a})
	mux := http.NewServeMux()
	// Uncompressed, so that the redactor sees the text.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.store.Err(); err != nil {
			http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if st := a.store.Stats(); st.BelowFloor {
			http.Error(w, fmt.Sprintf("store: refusing appends: %d bytes free, below store.min_free_bytes %d", st.FreeBytes, st.MinFreeBytes),
				http.StatusServiceUnavailable)
			return
		}
		if p := a.telemetryProblems(time.Now()); len(p) > 0 {
			http.Error(w, "telemetry: "+strings.Join(p, "; "), http.StatusServiceUnavailable)
			return
		}
		if p := a.replicationProblems(time.Now()); len(p) > 0 {
			http.Error(w, "sync: "+strings.Join(p, "; "), http.StatusServiceUnavailable)
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

// replicationStall is how long a stream may go without a commit, with
// errors and events waiting, before /healthz fails.
const replicationStall = time.Minute

// replicationProblems says which streams cannot replicate: stopped ones,
// and ones failing for replicationStall while the centre is reachable (an
// uplink outage is the edge's normal life, shown in /status, not a
// failure of the agent).
func (a *Agent) replicationProblems(now time.Time) []string {
	nc := a.centralConn()
	reachable := nc != nil && (nc.IsConnected() || nc.IsClosed())
	var out []string
	for _, s := range a.replStats() {
		if p := s.Problem(now, replicationStall); p != "" && (s.Stopped != "" || reachable) {
			out = append(out, p)
		}
	}
	return out
}

// Bounds of the HTTP endpoints: a scraper or a curious host cannot hold
// more than maxHTTPConns connections (further ones wait in the kernel's
// accept queue), nor keep an idle keep-alive connection past
// httpIdleTimeout, nor send more than httpMaxHeaderBytes of headers.
const (
	maxHTTPConns       = 64
	httpIdleTimeout    = 30 * time.Second
	httpMaxHeaderBytes = 16 << 10
)

// serveHTTP serves h on ln within the bounds above, until the returned
// server is shut down.
func serveHTTP(ln net.Listener, h http.Handler) *http.Server {
	srv := newHTTPServer(h)
	go srv.Serve(netutil.LimitListener(ln, maxHTTPConns))
	return srv
}

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
	}
}
