package agent

import (
	"embed"
	"io/fs"
	"net/http"
	"net/http/pprof"
)

// web holds the status page and its vendored plotting library (uPlot,
// MIT; version and licence in web/vendor/uplot/). Everything is in the
// binary: the page works offline, without a CDN.
//
//go:embed web
var web embed.FS

// operatorRoutes adds /status/history to mux and returns the handler that
// serves it all: every response of mux passes through the redactor; the
// page's files (constants of the binary) and the /debug/pprof profiles
// (binary, and only with http.pprof: true) do not.
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
		outer.HandleFunc("/debug/pprof/", pprof.Index)
		outer.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		outer.HandleFunc("/debug/pprof/profile", pprof.Profile)
		outer.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		outer.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return outer
}
