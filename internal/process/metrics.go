package process

import (
	"cmp"
	"log/slog"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics returns a mux serving GET /metrics from g and, when withPprof is
// set, Go's profiles under /debug/pprof/ (net/http/pprof's handlers, for
// `go tool pprof http://ADDR/debug/pprof/profile`). Profiling is for the
// metrics address only, off unless asked for: a profile costs CPU while it
// runs and shows the process's internals. Errors gathering the metrics go
// to logger at level warn; nil discards them. Add a command's other
// endpoints (/healthz, /readyz) to the mux returned.
func Metrics(g prometheus.Gatherer, logger *slog.Logger, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cmp.Or(logger, slog.New(slog.DiscardHandler)).Handler(), slog.LevelWarn)}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
