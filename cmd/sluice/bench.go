package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/bench"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
)

// runBench measures decision latency and throughput: of a store (in-process,
// or Redis with --redis) called directly, or of an HTTP endpoint with --url,
// optionally beside a baseline URL measured in the same run; or with
// --overhead, the latency a gateway adds to an upstream (runOverhead).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "[--redis ADDRS | --url URL [--baseline-url URL] | --fleet (--local | --redis ADDRS)] [flags]", stderr,
		"Measures decision latency and throughput: of the decision stack called in",
		"process (counting in memory, or in Redis with --redis), or of a running",
		"gateway's HTTP endpoint with --url. With --fleet, runs virtual gateways",
		"through scenarios in each mode and writes a table, JSON and an HTML report.",
		"See docs/benchmarks.md.",
	)
	redis := addRedisFlags(fs)
	url := fs.String("url", "", "measure HTTP GETs of this URL (a gateway) instead of a store")
	baseline := fs.String("baseline-url", "", "with --url: also measure this URL (the same upstream without the limiter, or a gateway counting in process)")
	metricsURL := fs.String("metrics-url", "", "with --url: the gateway's /metrics, read before and after to report where its answers came from (the source label)")
	concurrency := fs.Int("concurrency", 16, "goroutines issuing requests")
	duration := fs.Duration("duration", 5*time.Second, "how long each measurement runs")
	maxOps := fs.Int("max-ops", 5_000_000, "most requests each measurement sends")
	keys := fs.Int("keys", 1000, "distinct API keys")
	rate := fs.Int64("rate", 100, "store and --overhead modes: each key's limit a second (burst twice that)")
	bare := fs.Bool("bare", false, "with --redis: also measure the bare Redis store, without leases and guard, in the same run")
	overhead := fs.Bool("overhead", false, "measure the latency a gateway adds: the same GETs to --upstream directly and through a gateway started here over the store (--redis), side by side, at half the capacity and at the capacity")
	upstream := fs.String("upstream", "", "with --overhead: the upstream `URL`, on loopback; empty starts one in this process")
	at := fs.String("at", "", "with --overhead: pair `rates` a second, comma-separated, instead of half the capacity and the capacity")
	fleet := fs.Bool("fleet", false, "run the fleet scenarios: --gateways virtual gateways (0 means 4) in this process, each with its own stack and Redis connections, fed round-robin; "+
		"each mode runs each scenario for --duration; writes a summary, --json and --html (see docs/benchmarks.md, Fleet bench)")
	relayRun := fs.Bool("relay", false, "run the relay bench (issue 24): --gateways virtual gateways (0 means 2000) leasing from Redis directly, then through --relays relays on loopback, "+
		"on one busy key and many quiet ones; needs --local or --redis")
	relays := fs.Int("relays", 2, "with --relay: relays serving the virtual gateways")
	relayRate := fs.Float64("relay-rate", 3000, "with --relay: requests a `rate` a second offered in both modes, half of them for the busy key (100 a second)")
	var fo fleetOptions
	fs.StringVar(&fo.scenarios, "scenario", "all", "with --fleet: scenarios to run, comma-separated: steady, hot, storm, pause, outage, regions, lower, or all")
	fs.StringVar(&fo.modes, "modes", "all", "with --fleet: modes compared on the same traffic, comma-separated: per-request, leases, leases+cache, or all")
	fs.BoolVar(&fo.local, "local", false, "with --fleet: start redis-server processes here (a standalone server, and a 3-primary cluster for the outage scenario) instead of --redis")
	fs.BoolVar(&fo.allowRemote, "allow-remote", false, "with --fleet: allow --redis addresses that are not loopback")
	fs.Float64Var(&fo.offered, "offered", 2000, "with --fleet: requests a `rate` a second offered in each scenario")
	fs.Uint64Var(&fo.seed, "seed", 1, "with --fleet: seed of the traffic; the same seed gives every mode the same requests")
	fs.StringVar(&fo.jsonPath, "json", "sluice-bench.json", "with --fleet: write the figures to this `file`; empty writes none")
	fs.StringVar(&fo.htmlPath, "html", "sluice-bench.html", "with --fleet: write the report with its charts to this self-contained HTML `file`; empty writes none")
	fs.Float64Var(&fo.maxErrorRate, "max-error-rate", 0.001, "with --fleet: the run fails when more than this share of requests fail (errors are counted by kind either way)")
	var pcfg pipeline.Config
	addPipelineFlags(fs, &pcfg)
	fs.Lookup("gateways").Usage = "store mode: `number` of gateways the measured stack is sized for (leases, the local fallback); 0 means 1. " +
		"With --fleet: virtual gateways fed round-robin; 0 means 4"
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if pcfg.Redis, err = redis.Config(os.Getenv); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if *relayRun {
		return runBenchRelay(ctx, bench.RelayConfig{Addrs: pcfg.Redis.Addrs, Gateways: pcfg.Fleet.Gateways, Relays: *relays, Rate: *relayRate,
			Workers: *concurrency, Duration: *duration}, fo.local, fo.allowRemote, stdout)
	}
	if *fleet {
		if !(fo.offered > 0) {
			return fmt.Errorf("bench: --offered %v: want a positive rate", fo.offered)
		}
		if *duration <= 0 {
			return fmt.Errorf("bench: --duration %v: a fleet run must be bounded; want a positive duration", *duration)
		}
		fo.pipeline, fo.workers, fo.duration = pcfg, *concurrency, *duration
		fo.command = "sluice bench " + strings.Join(args, " ")
		return runFleet(ctx, fo, stdout, stderr)
	}
	if *overhead {
		rates, err := parseRates(*at)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		pcfg.Fleet.Gateways = cmp.Or(pcfg.Fleet.Gateways, 1) // one process: say so, rather than warn
		return runOverhead(ctx, overheadOptions{upstream: *upstream, at: rates, concurrency: *concurrency, duration: *duration,
			maxPairs: *maxOps, keys: *keys, rate: *rate, pipeline: pcfg}, stdout)
	}
	cfg := bench.Config{Concurrency: *concurrency, Duration: *duration, MaxOps: *maxOps}
	if *url != "" {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *concurrency}, Timeout: 10 * time.Second}
		var base bench.Result
		if *baseline != "" {
			base = bench.Run(ctx, cfg, bench.HTTPOp(client, *baseline, *keys))
			fmt.Fprintf(stdout, "baseline %s\n  %v\n", *baseline, base)
		}
		var before map[string]float64
		if *metricsURL != "" {
			if before, err = bench.Sources(ctx, client, *metricsURL); err != nil {
				return fmt.Errorf("bench: --metrics-url: %w", err)
			}
		}
		r := bench.Run(ctx, cfg, bench.HTTPOp(client, *url, *keys))
		fmt.Fprintf(stdout, "limited  %s\n  %v\n", *url, r)
		if *metricsURL != "" {
			after, err := bench.Sources(ctx, client, *metricsURL)
			if err != nil {
				return fmt.Errorf("bench: --metrics-url: %w", err)
			}
			fmt.Fprintf(stdout, "  sources: %s\n", bench.Shares(before, after))
		}
		if *baseline != "" && base.Ops > 0 && r.Ops > 0 {
			fmt.Fprintf(stdout, "added latency: p50 %v, p99 %v; throughput ratio %.2f\n",
				r.P50-base.P50, r.P99-base.P99, r.Throughput()/base.Throughput())
		}
		return firstError(r)
	}
	// The production stack, as the gateway builds it.
	if len(pcfg.Redis.Addrs) > 0 {
		pcfg.Fleet.Gateways = cmp.Or(pcfg.Fleet.Gateways, 1) // one process: say so, rather than warn
	}
	p, err := pipeline.New(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer p.Close()
	if rs := p.Redis(); rs != nil && !rs.Connected() {
		// The stack would start and answer locally; a benchmark of the
		// local fallback labelled Redis would mislead.
		return fmt.Errorf("bench: --redis %s: Redis cannot be reached", strings.Join(pcfg.Redis.Addrs, ","))
	}
	limits := []limit.Limit{
		{Name: "s", Count: *rate, Period: time.Second, Burst: 2 * *rate},
		{Name: "m", Count: 50 * *rate, Period: time.Minute},
	}
	var base bench.Result
	if *bare && p.Redis() != nil {
		base = bench.Run(ctx, cfg, bench.StoreOp(p.Redis(), *keys, limits))
		fmt.Fprintf(stdout, "bare redis store, %d keys, 2 limits each\n  %v\n", *keys, base)
	}
	r := bench.Run(ctx, cfg, bench.StoreOp(p, *keys, limits))
	fmt.Fprintf(stdout, "%s, %d keys, 2 limits each\n  %v\n", stackName(pcfg), *keys, r)
	if base.Ops > 0 && r.Ops > 0 {
		fmt.Fprintf(stdout, "throughput ratio against the bare store %.2f\n", r.Throughput()/base.Throughput())
	}
	return cmp.Or(firstError(base), firstError(r))
}

// stackName says what a bench measures: the in-process store, or the
// stack over Redis and the layers it has.
func stackName(cfg pipeline.Config) string {
	if len(cfg.Redis.Addrs) == 0 {
		return "in-process store"
	}
	layers := "leases, guard, store"
	if cfg.NoLeases {
		layers = "guard, store"
	}
	return "redis " + strings.Join(cfg.Redis.Addrs, ",") + " (" + layers + ")"
}

func firstError(r bench.Result) error {
	if r.Errors > 0 {
		return fmt.Errorf("bench: %d of %d requests failed; first: %w", r.Errors, r.Ops, r.FirstError)
	}
	return nil
}
