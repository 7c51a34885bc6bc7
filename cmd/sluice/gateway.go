package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/process"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/tracing"
)

// gatewayOptions are the gateway's command-line flags.
type gatewayOptions struct {
	Listen         string
	Upstream       string // empty: the built-in answer
	Rules          string // a rules file
	RulesURL       string // the rules service
	RulesCache     string // where the last snapshot from RulesURL is kept
	GatewayID      string // this gateway's name to the rules service; empty: $SLUICE_GATEWAY_ID, else host and PID
	Region         string // this gateway's region, for the fleet count per region; empty: $SLUICE_REGION
	Redis          redisstore.Config
	MetricsListen  string
	TrustedProxies []netip.Prefix
	UnknownKeys    bool // --unknown-keys-as-address
	StoreTimeout   time.Duration
	ReadTimeout    time.Duration // of a whole request, body included
	runFlags
	Pipeline      pipeline.Config // the decision stack, but Redis addresses, logger and metrics
	Shares        shareOptions    // this region's share of global limits, from the quota balancer
	UpstreamConns upstreamFlags   // how --upstream is reached: pool, timeouts, TLS
}

// parseGatewayFlags reads the gateway's flags. Errors are usageErrors: the
// flag set has printed them.
func parseGatewayFlags(args []string, stderr io.Writer) (gatewayOptions, error) {
	opts := gatewayOptions{Listen: defaultListen, ReadTimeout: process.DefaultReadTimeout}
	fs := newFlagSet("gateway", "[flags]", stderr,
		"Runs the rate-limiting gateway. With no flags: the built-in demo rules, an",
		"in-process store and a built-in answer on "+defaultListen+".",
	)
	fs.StringVar(&opts.Listen, "listen", opts.Listen, "`address` to serve the API on")
	fs.StringVar(&opts.Upstream, "upstream", "", "`URL` of the API to proxy to; empty answers every allowed request with a small JSON")
	addUpstreamFlags(fs, &opts.UpstreamConns)
	fs.StringVar(&opts.Rules, "rules", "", "rules `file` (YAML); empty uses the built-in demo rules")
	fs.StringVar(&opts.RulesURL, "rules-url", "", "`URL` of the rules service to take rules from instead of a file")
	fs.StringVar(&opts.RulesCache, "rules-cache", "", "`file` keeping the last rules from --rules-url, for starts while the service is down")
	fs.StringVar(&opts.GatewayID, "gateway-id", "", "`name` of this gateway to the rules service; empty means $"+envGatewayID+", else host name and process ID")
	fs.StringVar(&opts.Region, "region", "", "`region` this gateway serves, for the rules service's fleet count; empty means $"+envRegion)
	redis := addRedisFlags(fs)
	fs.StringVar(&opts.MetricsListen, "metrics-listen", "", "`address` to serve /metrics, /healthz and /readyz on; empty serves no metrics")
	fs.Func("trusted-proxy", "`CIDR`s, comma-separated, of proxies whose X-Forwarded-For is believed", func(s string) error {
		opts.TrustedProxies = nil
		for _, c := range commaList(s) {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				a, aerr := netip.ParseAddr(c)
				if aerr != nil {
					return fmt.Errorf("%q is not a CIDR or an address", c)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			opts.TrustedProxies = append(opts.TrustedProxies, p)
		}
		return nil
	})
	fs.BoolVar(&opts.UnknownKeys, "unknown-keys-as-address", false, "limit a request whose API key is not in the rules' key directory by its client address, as if it had no key; for directories that list every valid key")
	fs.DurationVar(&opts.StoreTimeout, "store-timeout", 0, "bound on each store call; past it the request fails open (or 503 under fail_mode closed); with --redis it must exceed --redis-timeout; 0 for none")
	fs.DurationVar(&opts.ReadTimeout, "read-timeout", opts.ReadTimeout, "how long a client may take to send a whole request, body included; 0 for no bound")
	fs.DurationVar(&opts.Pipeline.Inflight.Timeout, "concurrency-slot-timeout", 0, "how long a request may hold a concurrency slot (rules' concurrency: N): a slot older than this is dropped, so a crashed gateway's slots free themselves; set it to your longest request; 0 means 60s")
	addRunFlags(fs, &opts.runFlags, defaultShutdownTimeout, "--metrics-listen")
	addPipelineFlags(fs, &opts.Pipeline)
	addRelayFlag(fs, &opts.Pipeline.Relay)
	registerShareFlags(fs, &opts.Shares)
	err := parseFlags(fs, args)
	if err != nil {
		return opts, err
	}
	if opts.Pipeline.Inflight.Timeout < 0 {
		return opts, usagef(fs, "--concurrency-slot-timeout %v: must not be negative", opts.Pipeline.Inflight.Timeout)
	}
	opts.Redis, err = redis.Config(os.Getenv)
	return opts, err
}

// checkStoreTimeout refuses a --store-timeout that would cut Redis calls
// short of --redis-timeout. The guard bounds each Redis call itself and
// answers from the local fallback past its deadline; a shorter bound on the
// whole store call only pre-empts that, and reads as a second, conflicting
// Redis deadline.
func checkStoreTimeout(opts gatewayOptions) error {
	if len(opts.Redis.Addrs) == 0 || opts.StoreTimeout == 0 {
		return nil
	}
	rt := cmp.Or(opts.Pipeline.Guard.Timeout, guard.DefaultTimeout)
	if opts.StoreTimeout <= rt {
		return fmt.Errorf("--store-timeout %v is not above --redis-timeout %v: with --redis, --redis-timeout bounds each Redis call "+
			"(then the request is limited locally); set --store-timeout above it, or leave it unset", opts.StoreTimeout, rt)
	}
	return nil
}

// runGateway runs the gateway until ctx is done, then shuts it down.
func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseGatewayFlags(args, stderr)
	if err != nil {
		return err
	}
	if opts.Pprof && opts.MetricsListen == "" {
		return fmt.Errorf("--pprof needs --metrics-listen: the profiles are served on the metrics address only")
	}
	if opts.Rules != "" && opts.RulesURL != "" {
		return fmt.Errorf("--rules and --rules-url are both set; choose one")
	}
	if err := checkStoreTimeout(opts); err != nil {
		return err
	}
	logger := opts.logger(stderr)

	next, err := upstreamHandler(opts.Upstream, &opts.UpstreamConns, logger)
	if err != nil {
		return err
	}
	src, stopRules, err := newRuleSource(ctx, opts, logger)
	if err != nil {
		return err
	}
	// Last of all, after the requests in flight: their decisions go in the
	// rules client's last report.
	defer stopRules()
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	// The API's requests in flight. Shutdown stops accepting, waits for
	// them, and only then closes the pipeline (leases, guard, Redis);
	// requests that outlive even that keep it open, since the process is
	// about to exit anyway.
	var handlers process.Inflight
	tp, stopTracing, err := startGatewayTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	storeInUse := false
	pcfg := opts.Pipeline
	pcfg.Redis, pcfg.Logger, pcfg.Registerer = opts.Redis, logger, reg
	pcfg.Redis.Wrap = func(c rueidis.Client) rueidis.Client { return tracing.Redis(c, tp) }
	pcfg.Fleet.Count = fleetSize(src, regionOf(opts))
	if err := relayWiring(&pcfg.Relay, gatewayName(opts), len(opts.Redis.Addrs) > 0); err != nil {
		return err
	}
	if pcfg.Shares, err = shareConfig(opts); err != nil {
		return err
	}
	store, err := pipeline.New(ctx, pcfg)
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM or SIGINT while connecting: a stop asked for.
			logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "gateway stopped while connecting to redis")
			return nil
		}
		return fmt.Errorf("--redis: %w", err)
	}
	defer func() {
		if !storeInUse {
			store.Close()
		}
	}()
	if rs := store.Redis(); rs != nil {
		mode := "standalone"
		switch {
		case !rs.Connected():
			mode = "unknown: not connected yet, limiting locally meanwhile"
		case rs.Cluster():
			mode = "cluster"
		}
		logger.LogAttrs(ctx, slog.LevelInfo, "counting in redis", slog.Any("addrs", opts.Redis.Addrs), slog.Bool("tls", opts.Redis.TLS != nil), slog.String("mode", mode))
	} else {
		logger.LogAttrs(ctx, slog.LevelInfo, "counting in process; pass --redis to share limits between gateways")
	}
	if sh := store.Shares(); sh != nil {
		stopShares, err := followBalancer(sh, opts, logger)
		if err != nil {
			return err
		}
		defer stopShares()
	}
	onDecision, err := ruleSourceHooks(src, reg)
	if err != nil {
		return err
	}
	lim, err := gateway.New(gateway.Config{
		Store: tracing.Store(store, tp), Rules: src, TrustedProxies: opts.TrustedProxies, UnknownKeysAsAddress: opts.UnknownKeys,
		Logger: logger, Registerer: reg, Timeout: opts.StoreTimeout, OnDecision: onDecision, Settle: store,
	})
	if err != nil {
		return err
	}
	health := gateway.Health(src)
	ready := process.Ready(store.Down)
	// next's upstream calls pass the request's trace on in traceparent.
	if p, ok := next.(*httputil.ReverseProxy); ok {
		p.Transport = tracing.Transport(p.Transport, tp, nil)
	}
	limited := tracing.Handler(lim.Middleware(next), tp, nil)
	api := handlers.Track(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Not a ServeMux: it would redirect unclean paths the upstream
		// should see as they are.
		switch r.URL.Path {
		case "/healthz":
			health.ServeHTTP(w, r)
			return
		case "/readyz":
			ready.ServeHTTP(w, r)
			return
		}
		limited.ServeHTTP(w, r)
	}))

	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	apiServer := process.NewServer(api, logger)
	apiServer.ReadTimeout = opts.ReadTimeout
	eps := []process.Endpoint{{Server: apiServer, Listener: ln}}
	if opts.MetricsListen != "" {
		mln, err := net.Listen("tcp", opts.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := process.Metrics(reg, logger, opts.Pprof)
		mux.Handle("/healthz", health)
		mux.Handle("/readyz", ready)
		explain, err := gatewayExplain(src, store, opts)
		if err != nil {
			ln.Close()
			mln.Close()
			return err
		}
		mux.Handle(gateway.ExplainPath, explain)
		eps = append(eps, process.Endpoint{Server: process.NewServer(mux, logger), Listener: mln})
		fmt.Fprintf(stdout, "sluice gateway: metrics on http://%s/metrics\n", mln.Addr())
	}
	upstream := cmp.Or(opts.Upstream, "built-in answer")
	fmt.Fprintf(stdout, "sluice gateway: listening on http://%s (upstream: %s)\n", ln.Addr(), upstream)
	logger.LogAttrs(ctx, slog.LevelInfo, "gateway listening", slog.String("addr", ln.Addr().String()),
		slog.String("upstream", upstream), slog.Int("redis_addrs", len(opts.Redis.Addrs)))

	err = process.Run(ctx, opts.ShutdownTimeout, logger, eps...)
	// Past the shutdown timeout Run closed the connections, which cancels
	// their requests; give those a moment to notice.
	if n := handlers.Wait(handlersGiveUp); n > 0 {
		storeInUse = true
		logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn, "requests still running after shutdown; leaving the store open for them",
			slog.Int("requests", n))
	}
	if err == nil {
		logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "gateway stopped")
	}
	return err
}

// handlersGiveUp is how long shutdown waits for requests still running
// once the shutdown timeout has passed and their connections are closed.
const handlersGiveUp = 5 * time.Second

// fleetSize returns how the gateway learns its fleet's size: from the
// rules service when it follows one, counting only this region's gateways
// when it has a region the service knows, else nil (--gateways).
func fleetSize(src gateway.RuleSource, region string) func() int {
	c, ok := src.(*rulesync.Client)
	if !ok {
		return nil
	}
	return func() int {
		f := c.FleetSize()
		if n := f.Regions[region]; region != "" && n > 0 {
			return n
		}
		return f.Total
	}
}

// builtinAnswer is what an allowed request gets when there is no
// --upstream: a small JSON saying it passed.
func builtinAnswer(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Message string `json:"message"`
		Method  string `json:"method"`
		Path    string `json:"path"`
	}{"allowed by sluice; run with --upstream URL to proxy to your API", r.Method, r.URL.Path})
}
