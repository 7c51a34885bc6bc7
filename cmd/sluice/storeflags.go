package main

import (
	"flag"

	"github.com/sluice-rl/sluice/pipeline"
)

// addPipelineFlags registers on fs the flags that tune the decision stack
// over Redis (see package pipeline), with the package's defaults, and
// fills cfg from them. --redis itself is registered by each command.
func addPipelineFlags(fs *flag.FlagSet, cfg *pipeline.Config) {
	d := pipeline.Defaults
	fs.IntVar(&cfg.Gateways, "gateways", 0, "`number` of gateways in the fleet (in this region), for leases and the local fallback, until the rules service reports it; "+
		"0 means counted through Redis: each gateway writes an entry to one shared log (key sluice:fleet) every second, and the live entries give the count (1 until Redis first answers)")
	fs.DurationVar(&cfg.Timeout, "redis-timeout", d.Timeout, "how long a Redis call may take before its node is checked; past it the call waits while the node answers or is merely slow")
	fs.DurationVar(&cfg.DownAfter, "redis-down-after", 0, "how long a Redis node that owes replies must send nothing to be judged down: its breaker opens and its keys are limited locally; "+
		"shorter silences (a pause of tens of ms) are waited out. 0 means 75ms, or three times --redis-timeout when that is longer; at least --redis-timeout")
	fs.DurationVar(&cfg.MaxQueue, "max-queue", d.MaxQueue, "how much longer than --redis-timeout a request may wait while its Redis node is answering (the gateway itself is busy) before it is shed with 503")
	fs.IntVar(&cfg.TripAfter, "breaker-failures", d.TripAfter, "consecutive failed Redis calls that open a node's circuit breaker")
	fs.DurationVar(&cfg.Pause, "breaker-pause", d.Pause, "how long an open breaker limits its keys locally before probing the node")
	fs.Float64Var(&cfg.Slack, "fallback-slack", d.Slack, "while a node is down each gateway enforces slack/gateways of a limit")
	fs.BoolVar(&cfg.NoLeases, "no-leases", false, "check every request in Redis: no token leases for busy keys, no refusal cache")
}
