package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-rl/sluice/gateway"
)

// serveService serves a service's handler h and its /metrics (from reg) on
// listen until ctx is done, with run, the service's background work, going
// meanwhile under a context that ends first; then it waits for run. It is
// how the rules service and the balancer run: command names the command on
// stdout ("sluice rules: listening on ..."), what the service in the log,
// with attrs.
func serveService(ctx context.Context, command, what, listen string, h http.Handler, run func(context.Context) error,
	reg *prometheus.Registry, logger *slog.Logger, stdout io.Writer, shutdownTimeout time.Duration, attrs ...any) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}))

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
	err = gateway.Serve(ctx, gateway.NewServer(mux, logger), ln, shutdownTimeout, logger)
	cancel()
	return err
}
