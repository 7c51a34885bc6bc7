package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sluice-rl/sluice/internal/capacity"
)

// runPlan prints how big a deployment must be for the traffic the flags
// describe; every flag defaults to the reference design's figure.
func runPlan(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", "[flags]", stderr,
		"Sizes a deployment from traffic figures: gateways, Redis shards, memory and",
		"the lease batch of the busiest key. Every flag defaults to the reference",
		"design's figure. See docs/operations.md.",
	)
	var in capacity.Inputs
	fs.Float64Var(&in.PeakRPS, "peak-rps", 1_000_000, "API requests a second at peak")
	fs.Float64Var(&in.GatewayRPS, "gateway-rps", 5_000, "requests a second one gateway handles")
	fs.Float64Var(&in.GatewayBusy, "gateway-busy", 0.6, "target utilisation of the gateway fleet, 0 to 1")
	fs.Float64Var(&in.RedisShare, "redis-share", 1, "share of requests that call Redis (about 0.1 with leases)")
	fs.Float64Var(&in.ScriptsPerShard, "scripts-per-shard", 50_000, "limiter scripts a second one Redis shard runs safely")
	fs.Float64Var(&in.ActiveKeys, "active-keys", 1_000_000, "API keys active in an hour")
	fs.Float64Var(&in.RulesPerKey, "rules-per-key", 2, "limits per key")
	fs.Float64Var(&in.BytesPerBucket, "bytes-per-bucket", 100, "Redis memory of one token bucket")
	fs.Float64Var(&in.LimitPerMinute, "limit-per-minute", 1_000, "a typical limit, requests a minute")
	fs.Float64Var(&in.BytesPerLogEntry, "bytes-per-log-entry", 80, "Redis memory of one sliding-log entry")
	fs.Float64Var(&in.BytesPerCall, "bytes-per-call", 250, "bytes of one script call, request and reply")
	fs.Float64Var(&in.BusyKeyRPS, "busy-key-rps", 100_000, "the busiest key's limit, a second")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, err := capacity.Compute(in)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(what, value, so string) { fmt.Fprintf(w, "%s\t%s\t%s\n", what, value, so) }
	row("gateways", fmt.Sprintf("%d", p.Gateways), fmt.Sprintf("at %.0f%% busy; a limit kept in one gateway's memory is meaningless", p.Inputs.GatewayBusy*100))
	row("script calls", fmt.Sprintf("%.0f/s", p.ScriptCalls), "one atomic script per Redis call")
	row("redis shards", fmt.Sprintf("%d (%d with room)", p.Shards, p.ShardsWithRoom), "shard the counters by API key with a hash tag")
	row("bucket memory", bytesString(p.BucketBytes), "memory never forces sharding; calls a second do")
	row("sliding log memory", bytesString(p.LogBytes), "what an exact log would cost instead")
	row("redis traffic", bytesString(p.Bandwidth)+"/s", "not a design driver")
	row("lease batch", fmt.Sprintf("%d tokens", p.LeaseBatch), fmt.Sprintf("the busiest key costs its shard %.0f calls/s instead of %.0f", p.BusyKeyCalls, p.Inputs.BusyKeyRPS))
	return w.Flush()
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
