package agent

import (
	"embed"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
)

// web holds the status page and its vendored plotting library (uPlot,
// MIT; version and licence in web/vendor/uplot/). Everything is in the
// binary: the page works offline, without a CDN.
//
//go:embed web
var web embed.FS

// operatorRoutes adds /status/history to mux and returns the handler that
// serves it all: every response of mux, and pprof's command line, passes
// through the redactor; the page's files (constants of the binary) and
// the other /debug/pprof profiles (binary, only GET, and only with
// http.pprof: true) do not. Every request must name an allowed host
// (allowedHosts) and every response carries the security headers.
func (a *Agent) operatorRoutes(mux *http.ServeMux) http.Handler {
	mux.HandleFunc("GET /status/history", a.serveHistory)
	files, _ := fs.Sub(web, "web")
	static := http.FileServerFS(files)
	outer := http.NewServeMux()
	outer.Handle("/", a.red.Middleware(mux))
	outer.Handle("GET /{$}", static)
	outer.Handle("GET /app.js", static)
	outer.Handle("GET /app.css", static)
	outer.Handle("GET /vendor/", static)
	if a.cfg.HTTP.Pprof {
		// GET (and HEAD) only: other methods are answered 405.
		outer.HandleFunc("GET /debug/pprof/", pprof.Index)
		outer.Handle("GET /debug/pprof/cmdline", a.red.Middleware(http.HandlerFunc(pprof.Cmdline)))
		outer.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		outer.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		outer.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		outer.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "pprof: GET only", http.StatusMethodNotAllowed)
		})
	}
	return allowedHosts(a.cfg.HTTP.Hosts, securityHeaders(outer))
}

// pageCSP lets the page load only its own files and talk only to the
// agent; nothing may frame it.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// securityHeaders adds to every response what keeps a browser from
// running, framing or sniffing it as anything else.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", pageCSP)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// allowedHosts answers 421 to a request whose Host is not the agent's: a
// page of another site that rebinds its own name to 127.0.0.1 (DNS
// rebinding) reaches the listener from the operator's browser with its
// own name as Host. Allowed: IP addresses (a browser sends an address as
// Host only for a page of that address), localhost and *.localhost, the
// names in http.hosts, and no Host at all (HTTP/1.0).
func allowedHosts(names []string, h http.Handler) http.Handler {
	allowed := map[string]bool{"localhost": true}
	for _, n := range names {
		allowed[normHost(n)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := normHost(r.Host)
		if _, err := netip.ParseAddr(host); err == nil || host == "" || allowed[host] || strings.HasSuffix(host, ".localhost") {
			h.ServeHTTP(w, r)
			return
		}
		http.Error(w, fmt.Sprintf("host %q is not this agent's: add it to http.hosts to reach the agent by that name", host),
			http.StatusMisdirectedRequest)
	})
}

// normHost is a Host header's name: without its port, brackets, trailing
// dot and case.
func normHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if i := strings.IndexByte(h, '%'); i >= 0 { // an IPv6 zone
		h = h[:i]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}
