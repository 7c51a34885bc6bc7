package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/sluice-rl/sluice/internal/process"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rls"
)

// rlsOptions are the flags of sluice rls.
type rlsOptions struct {
	Listen         string // gRPC
	HTTPListen     string // JSON endpoint, /metrics, /healthz; empty: none
	Config         string
	ReloadEvery    time.Duration
	Redis          redisstore.Config
	Reflection     bool
	MaxConnAge     time.Duration // 0: connections live as long as the client keeps them
	ShadowMode     bool
	NearLimitRatio float64
	runFlags
	Pipeline pipeline.Config // the decision stack, but Redis addresses, logger and metrics
}

func parseRLSFlags(args []string, stderr io.Writer) (rlsOptions, error) {
	// 8081 is the port envoyproxy/ratelimit serves gRPC on.
	opts := rlsOptions{Listen: "127.0.0.1:8081", ReloadEvery: time.Second}
	fs := newFlagSet("rls", "--config DIR|FILE [flags]", stderr,
		"Serves Envoy's rate limit service (envoy.service.ratelimit.v3) from",
		"envoyproxy/ratelimit's YAML configuration. See docs/envoy.md.",
	)
	fs.StringVar(&opts.Listen, "listen", opts.Listen, "`address` to serve gRPC on: the rate limit service and gRPC health checking")
	fs.StringVar(&opts.HTTPListen, "http-listen", "", "`address` to serve the JSON endpoint (POST /json), /metrics, /healthz and /readyz on; empty serves none")
	fs.StringVar(&opts.Config, "config", "", "envoyproxy/ratelimit configuration: a YAML `file`, or a directory of them (one domain each)")
	fs.DurationVar(&opts.ReloadEvery, "reload-every", opts.ReloadEvery, "how often to look for configuration changes")
	redis := addRedisFlags(fs)
	fs.BoolVar(&opts.Reflection, "grpc-reflection", false, "serve gRPC server reflection, for grpcurl and the like")
	fs.BoolVar(&opts.ShadowMode, "shadow-mode", false, "answer OK to every request, counting those that would have been OVER_LIMIT (envoyproxy/ratelimit's SHADOW_MODE)")
	fs.Float64Var(&opts.NearLimitRatio, "near-limit-ratio", 0.8, "share of a limit past which hits count as near the limit (sluice_rls_near_limit_total), above 0 and below 1")
	fs.DurationVar(&opts.MaxConnAge, "max-connection-age", 0, "close each gRPC connection (with GOAWAY, calls in flight finishing) after about this long, so Envoy reconnects and spreads over new instances; 0 for never")
	addRunFlags(fs, &opts.runFlags, defaultShutdownTimeout, "--http-listen")
	addPipelineFlags(fs, &opts.Pipeline)
	fs.Lookup("gateways").Usage = "`number` of rls instances sharing these limits (in this region), for leases and the local fallback; 0 means 1, with a warning"
	err := parseFlags(fs, args)
	if err == nil {
		opts.Redis, err = redis.Config(os.Getenv)
	}
	if err != nil {
		return opts, err
	}
	if opts.Config == "" {
		return opts, usageOf(fs, errors.New("--config is required"))
	}
	return opts, nil
}

// runRLS serves the rate limit service until ctx is done, then shuts it
// down: health checks answer NOT_SERVING, calls in flight finish, and only
// then the store closes.
func runRLS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseRLSFlags(args, stderr)
	if err != nil {
		return err
	}
	if opts.Pprof && opts.HTTPListen == "" {
		return fmt.Errorf("--pprof needs --http-listen: the profiles are served beside /metrics only")
	}
	logger := opts.logger(stderr)
	watcher, err := rls.Watch(opts.Config, logger)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	// The gateway's decision stack: leases over the guard over Redis, or
	// the process's memory.
	pcfg := opts.Pipeline
	pcfg.Redis, pcfg.Logger, pcfg.Registerer = opts.Redis, logger, reg
	store, err := pipeline.New(ctx, pcfg)
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM or SIGINT while connecting: a stop asked for.
			logger.Info("rls stopped while connecting to redis")
			return nil
		}
		return fmt.Errorf("--redis: %w", err)
	}
	// Closed last, once every call in flight has its answer.
	defer store.Close()
	svc, err := rls.New(rls.Config{Store: store, Rules: watcher, Logger: logger, Registerer: reg,
		ShadowMode: opts.ShadowMode, NearLimitRatio: opts.NearLimitRatio})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	// Stop, past the shutdown timeout, still waits for the handlers it
	// cancels, so none of them outlives the store.
	grpcOpts := []grpc.ServerOption{grpc.WaitForHandlers(true)}
	if opts.MaxConnAge > 0 {
		grpcOpts = append(grpcOpts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: opts.MaxConnAge, MaxConnectionAgeGrace: opts.ShutdownTimeout}))
	}
	grpcServer, health := rls.NewGRPCServer(svc, opts.Reflection, grpcOpts...)
	eps := []process.Endpoint{{Server: grpcDrain{grpcServer, health}, Listener: ln}}
	fmt.Fprintf(stdout, "sluice rls: gRPC listening on grpc://%s\n", ln.Addr())
	httpAddr := ""
	if opts.HTTPListen != "" {
		hln, err := net.Listen("tcp", opts.HTTPListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--http-listen: %w", err)
		}
		mux := process.Metrics(reg, logger, opts.Pprof)
		mux.Handle("/json", svc)
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
		mux.Handle("/readyz", process.Ready(store.Down))
		eps = append(eps, process.Endpoint{Server: process.NewServer(mux, logger), Listener: hln})
		httpAddr = hln.Addr().String()
		fmt.Fprintf(stdout, "sluice rls: JSON endpoint, /metrics, /healthz and /readyz listening on http://%s\n", hln.Addr())
	}

	// The watcher, and health following Redis (NOT_SERVING while a node
	// is down), stop before the store closes (the deferred calls run last
	// in, first out).
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { followReadiness(ctx, health, store.Down, readinessEvery, logger) })
	wg.Go(func() { watcher.Run(ctx, opts.ReloadEvery) })
	// SIGHUP rereads the configuration at once; the watcher also polls it.
	defer process.OnHangup(ctx, func() {
		if changed, err := watcher.Reload(); err != nil {
			logger.Error("SIGHUP: rls config not reloaded; keeping the rules in force", "error", err)
		} else {
			logger.Info("SIGHUP: rls config reread", "changed", changed)
		}
	})()
	logger.Info("rls listening", "grpc", ln.Addr().String(), "http", httpAddr, "redis_addrs", len(opts.Redis.Addrs), "domains", watcher.Current().Domains())

	err = process.Run(ctx, opts.ShutdownTimeout, logger, eps...)
	logger.Info("rls stopped")
	return err
}

// grpcDrain is a gRPC server as a process.Server: shutting down answers
// NOT_SERVING to health checks, then lets the calls in flight finish.
type grpcDrain struct {
	*grpc.Server
	health *health.Server
}

func (g grpcDrain) Serve(ln net.Listener) error {
	if err := g.Server.Serve(ln); !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil // shut down before it began
}

func (g grpcDrain) Shutdown(ctx context.Context) error {
	g.health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		g.GracefulStop()
	}()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g grpcDrain) Close() error {
	g.Stop()
	return nil
}

// readinessEvery is how often the rls looks at Redis for its gRPC health.
const readinessEvery = 500 * time.Millisecond

// followReadiness sets h's status for the rate limit service and for the
// whole server (the empty name) from down, every interval until ctx ends:
// NOT_SERVING while down names a Redis node, SERVING otherwise. The
// service still answers meanwhile, from local limits; health tells Envoy
// and operators so, as /readyz does. Changes are logged.
func followReadiness(ctx context.Context, h *health.Server, down func(context.Context) []string, every time.Duration, log *slog.Logger) {
	serving := true
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, every)
		nodes := down(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if now := len(nodes) == 0; now != serving {
			serving = now
			status := healthpb.HealthCheckResponse_SERVING
			if !serving {
				status = healthpb.HealthCheckResponse_NOT_SERVING
				log.Warn("redis nodes down; health NOT_SERVING while limits are local", "down", nodes)
			} else {
				log.Info("redis answering; health SERVING")
			}
			h.SetServingStatus(rls.ServiceName, status)
			h.SetServingStatus("", status)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
