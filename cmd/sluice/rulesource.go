package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/process"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/rules"
)

// The environment variables a gateway following the rules service reads.
const (
	envGatewayID = "SLUICE_GATEWAY_ID" // default: host name and process ID
	envRegion    = "SLUICE_REGION"
	// envGatewayToken (rules.go) is the bearer token of role gateway.
)

// rulesStartTimeout is how long a gateway without a cached snapshot waits
// for the rules service before it gives up starting. A variable so that
// tests need not wait it out.
var rulesStartTimeout = 10 * time.Second

// newRuleSource returns where the gateway's rules come from: the rules
// file, the rules service, or the built-in demo rules, and a function that
// stops following the service (a no-op for the others). An invalid rules
// file is an error naming the file, the rule and the field.
func newRuleSource(ctx context.Context, opts gatewayOptions, logger *slog.Logger) (gateway.RuleSource, func(), error) {
	switch {
	case opts.RulesURL != "":
		c, stop, err := newServiceRules(ctx, opts, logger)
		if err != nil {
			return nil, nil, err
		}
		// Nothing to reload; the log shows whoever sent SIGHUP that it was received.
		stopLog := process.OnHangup(ctx, func() {
			logger.Info("SIGHUP: rules come from the rules service, which pushes every change; nothing to reload")
		})
		return c, func() { stopLog(); stop() }, nil
	case opts.RulesCache != "":
		return nil, nil, errors.New("--rules-cache needs --rules-url")
	case opts.Rules != "":
		f, err := newFileRules(opts.Rules, logger)
		if err != nil {
			return nil, nil, err
		}
		logger.LogAttrs(ctx, slog.LevelInfo, "rules loaded; SIGHUP or a change of the file reloads them",
			slog.String("file", opts.Rules), slog.String("hash", f.Current().Hash))
		hangup := process.Hangups(ctx)
		return f, process.Go(func(ctx context.Context) { f.run(ctx, hangup) }), nil
	}
	set, err := rules.Parse("built-in rules", defaultRules)
	if err != nil {
		return nil, nil, err
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "using the built-in demo rules; pass --rules FILE for your own", slog.String("hash", set.Hash))
	return gateway.StaticRules(set), process.OnHangup(ctx, func() { logger.Info("SIGHUP: the built-in demo rules have no file to reload") }), nil
}

// newServiceRules follows the rules service at opts.RulesURL until the
// returned stop function is called, which also sends the last report and
// waits for the client to end. It starts from the cache file when there is
// one, so a gateway restarted while the service is down still enforces the
// last rules it had; without one it waits up to rulesStartTimeout for the
// service, or until ctx is done. The client outlives ctx on purpose: a
// gateway shutting down keeps following the service while its requests in
// flight finish, and stops it after them, so their counts are reported.
func newServiceRules(ctx context.Context, opts gatewayOptions, logger *slog.Logger) (*rulesync.Client, func(), error) {
	id := gatewayName(opts)
	c, err := rulesync.New(rulesync.Config{
		URL: opts.RulesURL, Token: os.Getenv(envGatewayToken), Gateway: id, Region: regionOf(opts),
		CacheFile: opts.RulesCache, Logger: logger,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("--rules-url: %w", err)
	}
	stop := process.Go(func(ctx context.Context) { c.Run(ctx) })
	select {
	case <-c.Ready():
		logger.LogAttrs(ctx, slog.LevelInfo, "following the rules service", slog.String("url", opts.RulesURL),
			slog.String("gateway", id), slog.Int64("version", c.Current().Version))
		return c, stop, nil
	case <-time.After(rulesStartTimeout):
	case <-ctx.Done():
	}
	stop()
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	if err := c.CacheError(); err != nil {
		return nil, nil, fmt.Errorf("--rules-url %s: no snapshot within %v, and the --rules-cache %w: is the rules service up?",
			opts.RulesURL, rulesStartTimeout, err)
	}
	return nil, nil, fmt.Errorf("--rules-url %s: no snapshot within %v and no cached one (--rules-cache): is the rules service up?",
		opts.RulesURL, rulesStartTimeout)
}

// ruleSourceHooks returns what a rule source adds to the gateway: it
// registers the source's metrics on reg (the rules service's, or the
// rules file's reloads), and returns the
// gateway.Config.OnDecision that reports decisions to the rules service
// (nil for sources that need none).
func ruleSourceHooks(src gateway.RuleSource, reg prometheus.Registerer) (func(gateway.Event), error) {
	if f, ok := src.(*fileRules); ok {
		return nil, f.Register(reg)
	}
	c, ok := src.(*rulesync.Client)
	if !ok {
		return nil, nil
	}
	if err := c.Register(reg); err != nil {
		return nil, err
	}
	return func(e gateway.Event) {
		c.Observe(rulesync.Outcome{Version: e.RulesVersion, Key: e.Key, Shadow: e.Shadow, Limits: e.Limits, Rules: e.Rules,
			Decision: e.Decision, Err: e.Err})
	}, nil
}
