package main

import (
	"flag"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/pipeline"
)

// addPipelineFlags registers on fs the flags that tune the decision stack
// over Redis (see package pipeline), with guard's defaults, and fills cfg
// from them. --redis itself is registered by each command. A flag's
// default is the package's own zero-value default written out, so that a
// flag left alone and a zero field mean the same; --redis-down-after
// stays 0, which guard resolves from the timeout in force.
func addPipelineFlags(fs *flag.FlagSet, cfg *pipeline.Config) {
	g := &cfg.Guard
	fs.IntVar(&cfg.Fleet.Gateways, "gateways", 0, "`number` of gateways in the fleet (in this region), for leases and the local fallback, until the rules service reports it; "+
		"0 means counted through Redis: each gateway writes an entry to one shared log (key sluice:fleet) every second, and the live entries give the count (1 until Redis first answers)")
	fs.DurationVar(&g.Timeout, "redis-timeout", guard.DefaultTimeout, "how long a Redis call may take before its node is checked; past it the call waits while the node answers or is merely slow")
	fs.DurationVar(&g.DownAfter, "redis-down-after", 0, "how long a Redis node that owes replies must send nothing to be judged down: its breaker opens and its keys are limited locally; "+
		"shorter silences (a pause of tens of ms) are waited out. 0 means 75ms, or three times --redis-timeout when that is longer; at least --redis-timeout")
	fs.DurationVar(&g.MaxQueue, "max-queue", guard.DefaultMaxQueue, "how much longer than --redis-timeout a request may wait while its Redis node is answering (the gateway itself is busy) before it is shed with 503")
	fs.IntVar(&g.TripAfter, "breaker-failures", guard.DefaultTripAfter, "consecutive failed Redis calls that open a node's circuit breaker")
	fs.DurationVar(&g.Pause, "breaker-pause", guard.DefaultPause, "how long an open breaker limits its keys locally before probing the node")
	fs.Float64Var(&g.Slack, "fallback-slack", guard.DefaultSlack, "while a node is down each gateway enforces slack/gateways of a limit")
	fs.BoolVar(&cfg.NoLeases, "no-leases", false, "check every request in Redis: no token leases for busy keys, no refusal cache")
}
