package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// The environment variables the rules service reads, so that secrets stay
// out of the process list.
const (
	envPostgres     = "SLUICE_POSTGRES"
	envReadToken    = "SLUICE_READ_TOKEN"
	envWriteToken   = "SLUICE_WRITE_TOKEN"
	envGatewayToken = "SLUICE_GATEWAY_TOKEN"
)

// rulesOptions are the rules service's command-line flags.
type rulesOptions struct {
	cfg         rulesvc.Config
	redis       redisstore.Config // the gateways' Redis, for /admin/v1/usage and explain
	balancerURL string            // for explain's region shares
	listen      string
	tokensFile  string
	runFlags
}

func parseRulesFlags(args []string, stderr io.Writer) (rulesOptions, error) {
	o := rulesOptions{listen: "127.0.0.1:8083"}
	c := &o.cfg
	fs := newFlagSet("rules", "--postgres DSN [flags]", stderr,
		"Runs the rules service: the admin API under /admin/v1, the operator console",
		"under /ui (sign in with a read or write token), the gateways' snapshot long",
		"poll under /v1, and /metrics. Tokens come from --tokens and from the",
		"environment: "+envReadToken+", "+envWriteToken+" and "+envGatewayToken+".",
	)
	fs.StringVar(&c.Postgres, "postgres", os.Getenv(envPostgres), "PostgreSQL connection `DSN` (default $"+envPostgres+")")
	fs.StringVar(&c.Schema, "schema", "sluice", "PostgreSQL `schema` holding the service's tables; created and migrated on start")
	fs.StringVar(&o.listen, "listen", o.listen, "`address` to serve on")
	fs.StringVar(&o.tokensFile, "tokens", "", "YAML `file` of tokens: a list of {name, secret, role: read|write|gateway, max_gateways, gateway, region}; gateway binds a token to one gateway ID")
	fs.BoolVar(&c.TrustedNetwork, "trusted-network", false, "serve the gateway endpoints (/v1) without a gateway token: only for a network where nothing but gateways reaches the service")
	fs.IntVar(&c.MaxGateways, "max-gateways", 256, "most gateways registered at once under one gateway token without its own max_gateways, or on the trusted network")
	fs.Float64Var(&c.ReportRate, "report-rate", 1, "reports a second each gateway may send on average (bursts of 5)")
	fs.BoolVar(&c.ShadowRawKeys, "shadow-raw-keys", false, "store the API keys of shadow reports as sent, not hashed as the gateway's decision log writes them")
	durationFlag := func(p *time.Duration, name, def, usage string) {
		d, _ := rules.ParseDuration(def)
		*p = time.Duration(d)
		fs.Func(name, usage+" (default "+def+")", func(s string) error {
			d, err := rules.ParseDuration(s)
			*p = time.Duration(d)
			return err
		})
	}
	durationFlag(&c.MaxOverride, "max-override", "7d", "longest an emergency override may last")
	durationFlag(&c.ReportRetention, "report-retention", "7d", "how long gateways' reports are kept")
	fs.DurationVar(&c.PollTimeout, "poll-timeout", 25*time.Second, "longest a gateway's long poll is held")
	fs.DurationVar(&c.GatewayTTL, "gateway-ttl", 90*time.Second, "how long after its last poll and report a gateway still counts in the fleet")
	fs.DurationVar(&c.GatewayRetention, "gateway-retention", time.Hour, "how long a gateway that stopped polling stays in the fleet view before it is dropped")
	fs.DurationVar(&c.Refresh, "refresh", 5*time.Second, "how often the state is reread without a NOTIFY, and the fleet counted")
	fs.BoolVar(&c.Canary.Disabled, "no-canary", false, "send every new version to every gateway at once")
	fs.Float64Var(&c.Canary.Fraction, "canary-fraction", 0.01, "fraction of gateways that try a new version first (at least one)")
	fs.DurationVar(&c.Canary.Window, "canary-window", 4*time.Second, "how long a canary runs before its version is promoted (the default keeps a change within 10 s of every gateway)")
	fs.Float64Var(&c.Canary.Threshold, "canary-threshold", 0.05, "how much higher the canary's refusal rate may be than the rest's before the rollout halts")
	fs.Int64Var(&c.Canary.MinSample, "canary-min-sample", 200, "requests each side must report before refusal rates are compared; also the most one gateway's requests weigh")
	fs.DurationVar(&c.Canary.MaxWait, "canary-max-wait", 30*time.Second, "how long past the window a canary short of samples waits for them before it is promoted without comparison; negative for no wait")
	fs.IntVar(&c.Canary.MinGateways, "canary-min-gateways", 3, "distinct gateways, canaries and the rest together, that must report before refusal rates are compared")
	fs.Float64Var(&c.MaxGatewayRate, "max-gateway-rate", 100_000, "most requests a second one gateway can decide: a report claiming more since the gateway's previous one is refused")
	fs.DurationVar(&c.Canary.Check, "canary-check", 0, "how often a running canary is evaluated; 0 for a twentieth of the window")
	redis := addRedisFlags(fs)
	addRunFlags(fs, &o.runFlags, 10*time.Second, "--listen")
	fs.StringVar(&o.balancerURL, "balancer-url", "", "base `URL` of the quota balancer, read by explain?region= for a key's region shares; its operator token (one without a region) comes from $"+envBalancerToken)
	err := parseFlags(fs, args)
	if err == nil {
		o.redis, err = redis.Config(os.Getenv)
	}
	return o, err
}

// rulesTokens reads the tokens file and the environment.
func rulesTokens(file string) ([]rulesvc.Token, error) {
	ts, err := tokensFile[rulesvc.Token](file)
	if err != nil {
		return nil, err
	}
	for _, e := range []struct {
		env  string
		role rulesvc.Role
	}{{envReadToken, rulesvc.RoleRead}, {envWriteToken, rulesvc.RoleWrite}, {envGatewayToken, rulesvc.RoleGateway}} {
		if v := os.Getenv(e.env); v != "" {
			ts = append(ts, rulesvc.Token{Name: "env-" + string(e.role), Secret: v, Role: e.role})
		}
	}
	return ts, nil
}

// tokensFile reads a --tokens file, a YAML list of T (the rules service's
// or the balancer's tokens); no file, or an empty one, holds none.
func tokensFile[T any](file string) ([]T, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--tokens: %w", err)
	}
	var ts []T
	if err := strictYAML(b, &ts); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("--tokens %s: %w", file, err)
	}
	return ts, nil
}

// strictYAML decodes the YAML document b into v, refusing fields v does
// not have, so that a misspelt setting is an error rather than ignored.
func strictYAML(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// runRules runs the rules service until ctx is done, then shuts it down.
func runRules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseRulesFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.cfg.Postgres == "" {
		return fmt.Errorf("--postgres is empty (and $%s is not set)", envPostgres)
	}
	if o.cfg.Tokens, err = rulesTokens(o.tokensFile); err != nil {
		return err
	}
	logger := o.logger(stderr)
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	o.cfg.Registerer, o.cfg.Logger = reg, logger
	if !slices.ContainsFunc(o.cfg.Tokens, func(t rulesvc.Token) bool { return t.Role == rulesvc.RoleWrite }) {
		logger.Warn("no write token configured: every change will be refused; see --tokens")
	}

	// With the gateways' Redis, /admin/v1/usage reads their quota counts
	// and explain their buckets (read, never taken from).
	if rc := o.redis; len(rc.Addrs) > 0 {
		rc.Logger = logger
		rs, err := redisstore.New(ctx, rc)
		if err != nil {
			return fmt.Errorf("--redis: %w", err)
		}
		defer rs.Close()
		o.cfg.Counts, o.cfg.Store = rs, rs
	}
	if o.balancerURL != "" {
		if !strings.HasPrefix(o.balancerURL, "http://") && !strings.HasPrefix(o.balancerURL, "https://") {
			return fmt.Errorf("--balancer-url %q: want an http:// or https:// URL", o.balancerURL)
		}
		o.cfg.Balancer = &rulesvc.BalancerShares{URL: o.balancerURL, Token: os.Getenv(envBalancerToken)}
	}
	svc, err := rulesvc.New(ctx, o.cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	// Run ends the waiting long polls when ctx is done, which lets the
	// server shut down without waiting out the poll timeout.
	return serveService(ctx, "rules", "rules service", o.listen, svc.Handler(), svc.Run, reg, o.runFlags, logger, stdout,
		"schema", o.cfg.Schema)
}
