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

	"github.com/sluice-rl/sluice/internal/process"
)

// addPprofFlag registers --pprof on fs, to land in *p; where names the
// flag of the address the profiles are served on.
func addPprofFlag(fs *flag.FlagSet, p *bool, where string) {
	fs.BoolVar(p, "pprof", false, "also serve Go's profiles under /debug/pprof/ on "+where+" (go tool pprof); off by default, as they show the process's internals")
}

// serveService serves a service's handler h and its /metrics (from reg;
// with pprof, the profiles too) on listen until ctx is done, with run, the
// service's background work, going meanwhile under a context that ends
// first; then it waits for run. It is how the rules service and the
// balancer run: command names the command on stdout ("sluice rules:
// listening on ..."), what the service in the log, with attrs.
func serveService(ctx context.Context, command, what, listen string, h http.Handler, run func(context.Context) error,
	reg *prometheus.Registry, pprof bool, logger *slog.Logger, stdout io.Writer, shutdownTimeout time.Duration, attrs ...any) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	mux := process.Metrics(reg, logger, pprof)
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
	err = process.Run(ctx, shutdownTimeout, logger, process.Endpoint{Server: process.NewServer(mux, logger), Listener: ln})
	cancel()
	return err
}
