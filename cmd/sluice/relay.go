package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/relay"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
)

// envRelayToken holds the bearer token of the relays: a relay asks for
// it, a gateway with --relay gives it.
const envRelayToken = "SLUICE_RELAY_TOKEN"

// relayOptions are the relay's command-line flags.
type relayOptions struct {
	listen  string
	relays  int
	trusted bool
	timeout time.Duration
	lease   lease.Config
	guard   guard.Config
	runFlags
}

// runRelay runs a lease relay (docs/relay.md) until ctx is done.
func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o relayOptions
	fs := newFlagSet("relay", "--redis ADDRS --relays N [flags]", stderr,
		"Runs a lease relay: the gateways of a data centre lease tokens from it",
		"(sluice gateway --relay URL) instead of from Redis. It leases its share of",
		"100 ms of each busy key's limit from Redis (the limit over --relays) and",
		"hands out sub-leases from memory; quiet keys pass through to Redis. Every",
		"call must carry the bearer token in $"+envRelayToken+". See docs/relay.md.",
	)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8090", "`address` to serve "+relay.LeasePath+", /metrics and /healthz on")
	fs.IntVar(&o.relays, "relays", 0, "`number` of relays leasing from this Redis, every data centre's included: each leases that share of a batch (required)")
	fs.BoolVar(&o.trusted, "trusted-network", false, "serve without $"+envRelayToken+": only for a network where nothing but gateways reaches the relay")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "bound on answering one request of gateways")
	fs.DurationVar(&o.lease.TTL, "lease-ttl", time.Second, "how long the relay's leased tokens may be handed out; its sub-leases end with them")
	fs.DurationVar(&o.guard.Timeout, "redis-timeout", guard.DefaultTimeout, "how long a Redis call may take before its node is checked")
	redis := addRedisFlags(fs)
	addRunFlags(fs, &o.runFlags, defaultShutdownTimeout, "--listen")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.lease.WaitForRefill = true
	redisCfg, err := redis.Config(os.Getenv)
	switch {
	case err != nil:
		return err
	case len(redisCfg.Addrs) == 0:
		return fmt.Errorf("--redis is empty: a relay leases from Redis")
	case o.relays < 1:
		return fmt.Errorf("--relays %d: want the number of relays sharing this Redis, at least 1 (each leases 1/N of a batch)", o.relays)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration", o.timeout)
	}
	token := os.Getenv(envRelayToken)
	if token == "" && !o.trusted {
		return fmt.Errorf("no token: $%s is empty, and anyone who reached the relay could take tokens from every limit; "+
			"set it (and give gateways the same), or pass --trusted-network", envRelayToken)
	}
	logger := o.logger(stderr)
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	p, err := pipeline.New(ctx, pipeline.Config{Redis: redisCfg, Guard: o.guard, Lease: o.lease,
		Fleet: limit.Fleet{Gateways: o.relays}, Logger: logger, Registerer: reg})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("--redis: %w", err)
	}
	defer p.Close()
	ls := p.Lease()
	srv, err := relay.NewServer(relay.ServerConfig{Store: ls, Held: ls.Held, Token: token, TrustedNetwork: o.trusted,
		Timeout: o.timeout, Logger: logger, Registerer: reg})
	if err != nil {
		return err
	}
	if token == "" {
		logger.Warn("serving without a token (--trusted-network): anyone who reaches the relay can take tokens from every limit")
	}
	return serveService(ctx, "relay", "relay", o.listen, srv, func(context.Context) error { return nil }, reg, o.runFlags, logger, stdout,
		slog.Int("relays", o.relays), slog.Any("redis", redisCfg.Addrs))
}

// addRelayFlag registers the gateway's --relay on fs, into r.
func addRelayFlag(fs *flag.FlagSet, r *pipeline.Relay) {
	fs.Func("relay", "base `URL`s of this data centre's lease relays, comma-separated (sluice relay): busy keys lease through them instead of Redis, "+
		"and from Redis directly while none answers; needs --redis, and the relays' token in $"+envRelayToken, urlsFlag(&r.URLs))
	fs.DurationVar(&r.Timeout, "relay-timeout", 0, "with --relay: how long a relay may take to answer before its takes go to the next relay, or to Redis directly; 0 means 50ms "+
		"(a take it granted meanwhile is lost: under the limit, never over)")
}

// relayWiring completes r for a gateway called name: the relays' token,
// and the relay it tries first, by a hash of its name, so that a data
// centre's gateways spread over its relays. A relay needs Redis: the
// gateway's path while no relay answers.
func relayWiring(r *pipeline.Relay, name string, redis bool) error {
	if len(r.URLs) == 0 {
		return nil
	}
	if !redis {
		return fmt.Errorf("--relay needs --redis: gateways lease from Redis directly while no relay answers")
	}
	r.Token = os.Getenv(envRelayToken)
	h := fnv.New32a()
	h.Write([]byte(name))
	r.Prefer = int(h.Sum32() % uint32(len(r.URLs)))
	return nil
}
