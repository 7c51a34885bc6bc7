package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-rl/sluice/internal/process"
)

// runFlags are the flags of every command that serves: how it drains,
// logs and profiles.
type runFlags struct {
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	Pprof           bool // serve /debug/pprof/ beside /metrics
}

// addRunFlags registers --shutdown-timeout (default grace), --log-level
// and --pprof on fs, to land in f; metrics names the flag of the address
// the profiles are served on.
func addRunFlags(fs *flag.FlagSet, f *runFlags, grace time.Duration, metrics string) {
	fs.DurationVar(&f.ShutdownTimeout, "shutdown-timeout", grace, "how long to let requests in flight finish after SIGTERM or SIGINT")
	fs.TextVar(&f.LogLevel, "log-level", slog.LevelInfo, "`level` of the JSON logs on stderr: debug, info, warn or error")
	fs.BoolVar(&f.Pprof, "pprof", false, "also serve Go's profiles under /debug/pprof/ on "+metrics+" (go tool pprof); off by default, as they show the process's internals")
}

// logger returns the command's logger: JSON lines on w from --log-level.
func (f *runFlags) logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: f.LogLevel}))
}

// newRegistry returns a command's metrics registry, holding the Go
// runtime's (with the scheduler's latencies), the process's and
// sluice_build_info.
func newRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfoCollector(),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return reg, nil
}

// serveService serves a service's handler h and its /metrics (from reg;
// with pprof, the profiles too) on listen until ctx is done, with run, the
// service's background work, going meanwhile under a context that ends
// first; then it waits for run. It is how the rules service and the
// balancer run: command names the command on stdout ("sluice rules:
// listening on ..."), what the service in the log, with attrs.
func serveService(ctx context.Context, command, what, listen string, h http.Handler, run func(context.Context) error,
	reg *prometheus.Registry, rf runFlags, logger *slog.Logger, stdout io.Writer, attrs ...any) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	mux := process.Metrics(reg, logger, rf.Pprof)
	mux.Handle("/", h)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := run(ctx); err != nil && ctx.Err() == nil {
			logger.Error(what+" stopped its background work", "error", err)
		}
	})
	fmt.Fprintf(stdout, "sluice %s: listening on http://%s\n", command, ln.Addr())
	logger.Info(what+" listening", append([]any{"addr", ln.Addr().String()}, attrs...)...)
	err = process.Run(ctx, rf.ShutdownTimeout, logger, process.Endpoint{Server: process.NewServer(mux, logger), Listener: ln})
	cancel()
	return err
}
