package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/internal/bench"
	"github.com/sluice-rl/sluice/internal/capacity"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
)

// runPlan prints how big a deployment must be for the traffic the flags
// describe; every flag defaults to the reference design's figure, and with
// --measure the shard and gateway capacities are measured here instead.
func runPlan(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", "[flags]", stderr,
		"Sizes a deployment from traffic figures: gateways, Redis shards, memory and",
		"the lease batch of the busiest key. Every flag defaults to the reference",
		"design's figure; --measure measures the shard and gateway capacities on",
		"this machine instead. See docs/operations.md.",
	)
	var in capacity.Inputs
	fs.Float64Var(&in.PeakRPS, "peak-rps", 1_000_000, "API requests a second at peak")
	fs.Float64Var(&in.GatewayRPS, "gateway-rps", 5_000, "requests a second one gateway handles")
	fs.Float64Var(&in.GatewayBusy, "gateway-busy", 0.6, "target utilisation of the gateway fleet, 0 to 1")
	fs.Float64Var(&in.RedisShare, "redis-share", 1, "share of requests that call Redis (about 0.1 with leases)")
	fs.Float64Var(&in.ScriptsPerShard, "scripts-per-shard", 50_000, "limiter scripts a second one Redis shard runs safely")
	fs.Float64Var(&in.ActiveKeys, "active-keys", 1_000_000, "API keys active in an hour")
	fs.Float64Var(&in.RulesPerKey, "rules-per-key", 2, "limits per key")
	alg := fs.String("algorithm", string(limit.TokenBucket), "how the limits count, for memory: "+algorithmList())
	fs.Float64Var(&in.BytesPerBucket, "bytes-per-bucket", 0, "Redis memory of one key's limit; unset means the figure measured for --algorithm (docs/algorithms.md)")
	fs.Float64Var(&in.LimitPerMinute, "limit-per-minute", 1_000, "a typical limit, requests a minute")
	fs.Float64Var(&in.BytesPerLogEntry, "bytes-per-log-entry", capacity.BytesPerLogEntry, "Redis memory of one sliding-log entry (measured, docs/algorithms.md)")
	fs.Float64Var(&in.BytesPerCall, "bytes-per-call", 250, "bytes of one script call, request and reply")
	fs.Float64Var(&in.BusyKeyRPS, "busy-key-rps", 100_000, "the busiest key's limit, a second")
	fs.Float64Var(&in.DataCentres, "data-centres", 3, "data centres the gateways run in, each with its own lease relays (sluice relay)")
	fs.Float64Var(&in.RelayRPS, "relay-rps", 100_000, "lease calls a second one relay answers (an assumption; sluice bench --relay measures one in-process)")
	measure := fs.Bool("measure", false, "measure --scripts-per-shard and --gateway-rps on this machine by a short bounded run (and the retry storm's cost with the refusal cache), "+
		"against a redis-server started here, or --redis")
	measureFor := fs.Duration("measure-duration", time.Second, "with --measure: how long each of its three measurements runs")
	redis := addRedisFlags(fs)
	fs.Lookup("redis").Usage = "with --measure: Redis `address`es to measure against (loopback unless --allow-remote); empty starts a redis-server here"
	allowRemote := fs.Bool("allow-remote", false, "with --measure: allow a --redis address that is not loopback")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noZeros(fs); err != nil {
		return err
	}
	in.Algorithm = limit.Algorithm(*alg)
	var measured *bench.Capacity
	if *measure {
		if *measureFor <= 0 {
			return fmt.Errorf("plan: --measure-duration %v: want a positive duration", *measureFor)
		}
		redisCfg, err := redis.Config(os.Getenv)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		fmt.Fprintf(stderr, "plan: measuring a shard, a gateway and a retry storm, %v each...\n", *measureFor)
		c, err := measureHere(redisCfg.Addrs, *allowRemote, pipeline.Config{Redis: redisCfg}, *measureFor)
		if err != nil {
			return fmt.Errorf("plan: --measure: %w", err)
		}
		measured = &c
		// A figure given on the command line wins over the measured one:
		// a gateway's measured rate leaves out HTTP, and an operator who
		// measured a whole gateway knows better.
		if !given(fs, "scripts-per-shard") {
			in.ScriptsPerShard = c.ScriptsPerShard
		}
		if !given(fs, "gateway-rps") {
			in.GatewayRPS = c.GatewayRPS
		}
		if c.StormCallsPerRequest > 0 {
			in.StormCachedShare = c.StormCallsPerRequestCached
		}
	}
	p, err := capacity.Compute(in)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(what, value, so string) { fmt.Fprintf(w, "%s\t%s\t%s\n", what, value, so) }
	if measured != nil {
		var used []string
		for _, f := range []struct {
			name string
			v    float64
		}{{"scripts-per-shard", measured.ScriptsPerShard}, {"gateway-rps", measured.GatewayRPS}} {
			if given(fs, f.name) {
				used = append(used, fmt.Sprintf("--%s as given (measured %.0f)", f.name, f.v))
			} else {
				used = append(used, fmt.Sprintf("--%s measured: %.0f", f.name, f.v))
			}
		}
		row("measured here", strings.Join(used, "; "),
			fmt.Sprintf("%.1f s runs on this machine, load generator included; a gateway's figure leaves out HTTP (give --gateway-rps from sluice bench --url)", measured.Seconds))
	}
	row("gateways", fmt.Sprintf("%d", p.Gateways), fmt.Sprintf("at %.0f%% busy; a limit kept in one gateway's memory is meaningless", p.Inputs.GatewayBusy*100))
	row("script calls", fmt.Sprintf("%.0f/s", p.ScriptCalls), "one atomic script per Redis call")
	row("redis shards", fmt.Sprintf("%d (%d with room)", p.Shards, p.ShardsWithRoom), fmt.Sprintf("at %.0f scripts/s a shard; shard the counters by API key with a hash tag", p.Inputs.ScriptsPerShard))
	row("bucket memory", bytesString(p.BucketBytes), fmt.Sprintf("%s at %.0f B a key's limit (measured, docs/algorithms.md); memory never forces sharding, calls a second do", p.Inputs.Algorithm, p.Inputs.BytesPerBucket))
	row("by algorithm", memoryByAlgorithm(p.MemoryByAlgorithm), "the same keys under each algorithm")
	row("redis traffic", bytesString(p.Bandwidth)+"/s", "not a design driver")
	row("lease batch", fmt.Sprintf("%d tokens", p.LeaseBatch), fmt.Sprintf("the busiest key costs its shard %.0f calls/s instead of %.0f", p.BusyKeyCalls, p.Inputs.BusyKeyRPS))
	row("busiest key's shard", fmt.Sprintf("%.1f%% of one shard", 100*p.BusyKeyLoad), "with leases; a key lives on one shard, so more shards do not spread it")
	r := p.Relay
	if len(p.Breaks) > 0 {
		row("without relays", "breaks", strings.Join(p.Breaks, "; "))
	} else {
		row("without relays", "holds", "leasing from Redis directly keeps the busiest key within its shard")
	}
	row("relays", fmt.Sprintf("%d a data centre, %d in all", r.PerDC, r.Total),
		fmt.Sprintf("sluice relay --relays %d; at %.0f lease calls/s a relay, at least 2 a data centre for availability", r.Total, p.Inputs.RelayRPS))
	row("relay batch", fmt.Sprintf("%d tokens", r.Batch),
		fmt.Sprintf("the busiest key costs its shard %.0f calls/s (%.1f%% of it) through the relays, instead of %.0f", r.BusyKeyCalls, 100*r.BusyKeyLoad, p.BusyKeyCalls))
	row("calls per shard", fmt.Sprintf("%.0f/s", r.CallsPerShard), "on average, with or without relays: quiet keys pass through them one call each")
	storm := "model: each gateway asks about every 100 ms while refused, plus the admitted batches"
	if measured != nil {
		storm = fmt.Sprintf("measured here: %.4f calls a request with the cache, %.3f without", measured.StormCallsPerRequestCached, measured.StormCallsPerRequest)
	}
	row("retry storm", fmt.Sprintf("%.0f calls/s without the refusal cache, %.0f with it", p.StormCalls, p.StormCallsCached),
		fmt.Sprintf("the busiest key retried at %d times its limit; %s", capacity.StormFactor, storm))
	return w.Flush()
}

// noZeros refuses a 0 given for any number flag (on the command line or
// in the environment): none of the plan's inputs can be zero, and a zero
// must not quietly stand for the default.
func noZeros(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || err != nil {
			return
		}
		if v, isFloat := g.Get().(float64); isFloat && v == 0 {
			def := f.DefValue
			if def == "0" {
				def = "the measured figure"
			}
			err = fmt.Errorf("plan: --%s 0: want a positive number (leave it out for the default, %s)", f.Name, def)
		}
	})
	return err
}

func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// measureHere measures capacity against addrs, or a redis-server it starts
// when addrs is empty, within two minutes at most.
func measureHere(addrs []string, allowRemote bool, pcfg pipeline.Config, d time.Duration) (bench.Capacity, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var target bench.Target
	if len(addrs) == 0 {
		s, stop, err := redistest.NewStandalone()
		if err != nil {
			return bench.Capacity{}, err
		}
		defer stop()
		target = bench.Target{Addrs: []string{s.Addr()}, Standalone: s}
		pcfg.Redis.Addrs = target.Addrs
	} else {
		if !allowRemote {
			if err := bench.Loopback(addrs); err != nil {
				return bench.Capacity{}, err
			}
		}
		target.Addrs = addrs
	}
	return bench.MeasureCapacity(ctx, target, pcfg, d)
}

func algorithmList() string {
	names := make([]string, len(limit.Algorithms))
	for i, a := range limit.Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

func memoryByAlgorithm(m map[limit.Algorithm]float64) string {
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %s", a, bytesString(m[a])))
	}
	return strings.Join(parts, ", ")
}

// bytesString formats n in decimal units, as capacity figures are quoted.
func bytesString(n float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for n >= 1000 && i < len(units)-1 {
		n /= 1000
		i++
	}
	return fmt.Sprintf("%.3g %s", n, units[i])
}
