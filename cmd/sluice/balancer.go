package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/balancersvc"
	"github.com/sluice-rl/sluice/internal/process"
	"github.com/sluice-rl/sluice/internal/sharesync"
	"github.com/sluice-rl/sluice/share"
)

// envBalancerToken holds, on a gateway, the bearer token it gives the
// balancer: its region's token. On the balancer it is the fleet token,
// good for every region, kept only while gateways move to region tokens
// (--tokens).
const envBalancerToken = "SLUICE_BALANCER_TOKEN"

// balancerOptions are the balancer's command-line flags.
type balancerOptions struct {
	cfg        balancersvc.Config
	tokensFile string
	listen     string
	minShare   float64
	runFlags
}

// commaList returns the items of a comma-separated flag, without spaces
// around them and without empty ones.
func commaList(s string) []string {
	var items []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			items = append(items, f)
		}
	}
	return items
}

// regionsFlag parses a comma-separated list of region names into *p.
func regionsFlag(p *[]string) func(string) error {
	return func(s string) error {
		*p = commaList(s)
		for i, r := range *p {
			if slices.Contains((*p)[:i], r) {
				return fmt.Errorf("region %q is named twice", r)
			}
		}
		if len(*p) == 0 {
			return fmt.Errorf("no region in %q", s)
		}
		return nil
	}
}

// urlsFlag parses a comma-separated list of URLs into *p.
func urlsFlag(p *[]string) func(string) error {
	return func(s string) error {
		if *p = commaList(s); len(*p) == 0 {
			return fmt.Errorf("no URL in %q", s)
		}
		return nil
	}
}

func parseBalancerFlags(args []string, stderr io.Writer) (balancerOptions, error) {
	o := balancerOptions{listen: "127.0.0.1:8082", minShare: 0.05}
	c := &o.cfg
	fs := newFlagSet("balancer", "--regions A,B,C [flags]", stderr,
		"Runs the quota balancer: gateways of every region report their busiest keys,",
		"and each region gets a share of each busy key's global limit in proportion",
		"to its traffic. Serves gateways under /v1, a key's shares at /v1/keys/KEY,",
		"/healthz and /metrics. Every call under /v1 must carry a bearer token: a region's",
		"from --tokens (reports and polls of that region only), an operator's from",
		"--tokens (key look-ups only), or the fleet token in $"+envBalancerToken+" (all).",
		"Without any the balancer refuses to start unless --trusted-network. See docs/regions.md.",
	)
	fs.StringVar(&o.listen, "listen", o.listen, "`address` to serve on")
	fs.Func("regions", "`names` of every region, comma-separated, as the gateways' --region", regionsFlag(&c.Regions))
	fs.DurationVar(&c.Interval, "interval", 10*time.Second, "how often shares are recomputed; give the gateways the same --share-interval")
	fs.DurationVar(&c.DownAfter, "down-after", 0, "how long a region may go without a report before its shares go to the others; 0 means three intervals")
	fs.Float64Var(&o.minShare, "min-share", o.minShare, "least `fraction` of each limit a region that is up keeps, to absorb a sudden shift")
	fs.IntVar(&c.MaxKeys, "max-keys", 10000, "most limits of keys balanced at once; the busiest are kept")
	fs.IntVar(&c.MaxGateways, "max-gateways", 1024, "most gateways of one region whose reports count; a report from one more is refused")
	fs.DurationVar(&c.MaxWait, "poll-timeout", 30*time.Second, "longest a gateway's long poll is held")
	fs.StringVar(&c.Primary, "standby-of", "", "base `URL` of the active balancer: stand by while it answers its /healthz, take over when it has not for --down-after")
	fs.StringVar(&o.tokensFile, "tokens", "", "YAML `file` of tokens: a list of {name, secret, region, gateway}; a token reports and polls for its region only (as one gateway, with gateway), one without a region reads /v1/keys only")
	fs.Int64Var(&c.MaxStateBytes, "max-state-bytes", balancer.DefaultMaxStateBytes, "bound on the reports kept, in `bytes` as docs/regions.md counts them; past it the least busy pairs are dropped")
	fs.Float64Var(&c.MaxGatewayRate, "max-gateway-rate", balancer.DefaultMaxGatewayRate, "most `tokens` a second one gateway's report may claim, every key included; a report above it is scaled down to it")
	fs.DurationVar(&c.MaxSkew, "max-clock-skew", 30*time.Second, "how far ahead of the balancer's clock a report may say it was sent; a report further ahead is refused")
	fs.BoolVar(&c.TrustedNetwork, "trusted-network", false, "serve /v1 without $"+envBalancerToken+": only for a network where nothing but gateways and operators reaches the balancer (it shows API keys)")
	addRunFlags(fs, &o.runFlags, 10*time.Second, "--listen")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	return o, nil
}

// balancerTokens reads the balancer's --tokens file, if any.
func balancerTokens(file string) ([]balancersvc.Token, error) {
	ts, err := tokensFile[balancersvc.Token](file)
	if err == nil && file != "" && len(ts) == 0 {
		return nil, fmt.Errorf("--tokens %s: no token in it", file)
	}
	return ts, err
}

// runBalancer runs the quota balancer until ctx is done.
func runBalancer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBalancerFlags(args, stderr)
	if err != nil {
		return err
	}
	if len(o.cfg.Regions) == 0 {
		return fmt.Errorf("--regions is empty: name every region, such as --regions us,eu,ap")
	}
	if o.minShare < 0 || o.minShare > 1 {
		return fmt.Errorf("--min-share %v: want a fraction from 0 to 1", o.minShare)
	}
	if o.cfg.Interval <= 0 || o.cfg.DownAfter < 0 || o.cfg.MaxWait <= 0 {
		return fmt.Errorf("--interval %v and --poll-timeout %v must be positive, --down-after %v not negative",
			o.cfg.Interval, o.cfg.MaxWait, o.cfg.DownAfter)
	}
	if o.cfg.DownAfter != 0 && o.cfg.DownAfter < 2*o.cfg.Interval {
		// A gateway reports once an interval: with less than two, one
		// late report would count its whole region down.
		return fmt.Errorf("--down-after %v: want at least twice --interval %v, or 0 for three intervals", o.cfg.DownAfter, o.cfg.Interval)
	}
	if o.cfg.MaxKeys < 1 || o.cfg.MaxGateways < 1 {
		return fmt.Errorf("--max-keys %d and --max-gateways %d: want at least 1", o.cfg.MaxKeys, o.cfg.MaxGateways)
	}
	// Trimming drops pairs, never a report itself: leave room for every
	// gateway's, with its names.
	if least := max(1<<20, int64(len(o.cfg.Regions))*int64(o.cfg.MaxGateways)*512); o.cfg.MaxStateBytes < least {
		return fmt.Errorf("--max-state-bytes %d: want at least %d (1 MiB, and 512 bytes for each of --max-gateways %d in each of %d regions)",
			o.cfg.MaxStateBytes, least, o.cfg.MaxGateways, len(o.cfg.Regions))
	}
	if !(o.cfg.MaxGatewayRate > 0) || o.cfg.MaxSkew <= 0 {
		return fmt.Errorf("--max-gateway-rate %v and --max-clock-skew %v must be positive", o.cfg.MaxGatewayRate, o.cfg.MaxSkew)
	}
	if o.cfg.Tokens, err = balancerTokens(o.tokensFile); err != nil {
		return err
	}
	// A zero share means the default; a --min-share of 0 asks for none.
	o.cfg.MinShare = max(uint32(o.minShare*share.Whole), 1)
	logger := o.logger(stderr)
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	o.cfg.Registerer, o.cfg.Logger = reg, logger
	switch o.cfg.Token = os.Getenv(envBalancerToken); {
	case o.cfg.Token == "" && len(o.cfg.Tokens) == 0 && !o.cfg.TrustedNetwork:
		return fmt.Errorf("no token: neither --tokens nor $%s is set, and anyone who reached the balancer could read the API keys it balances and move their shares; "+
			"give each region its token in --tokens, or pass --trusted-network if only gateways and operators reach the balancer", envBalancerToken)
	case o.cfg.Token == "" && len(o.cfg.Tokens) == 0:
		logger.Warn("serving /v1 without a token (--trusted-network): anyone who reaches the balancer can read the API keys it balances and move their shares")
	case o.cfg.Token != "" && len(o.cfg.Tokens) == 0:
		logger.Warn("one token for every region ($"+envBalancerToken+"): its holder can report for any region and move any key's shares; "+
			"give each region its own token with --tokens", "see", "docs/regions.md")
	case o.cfg.Token != "":
		logger.Warn("the fleet token ($" + envBalancerToken + ") is still accepted for every region besides the --tokens; " +
			"unset it once every gateway uses its region's token (sluice_balancer_fleet_token_calls_total stops rising)")
	}
	srv, err := balancersvc.New(o.cfg)
	if err != nil {
		return err
	}
	// Run answers the held polls when ctx is done, so shutdown need not
	// wait out the poll timeout.
	return serveService(ctx, "balancer", "balancer", o.listen, srv.Handler(), srv.Run, reg, o.runFlags, logger, stdout,
		"regions", o.cfg.Regions, "interval_ms", o.cfg.Interval.Milliseconds(), "standby_of", o.cfg.Primary)
}

// shareOptions are the gateway's flags for the quota balancer.
type shareOptions struct {
	URLs     []string      // --balancer-url: empty means no region shares
	Regions  []string      // --regions: every region, this one included
	Interval time.Duration // --share-interval: how often usage is reported
	Stale    time.Duration // --share-stale
}

// registerShareFlags adds the gateway's balancer flags to fs.
func registerShareFlags(fs *flag.FlagSet, o *shareOptions) {
	fs.Func("balancer-url", "base `URL`s of the quota balancer, comma-separated, the active one first; enforces this region's share of every limit (needs --region and --regions)", urlsFlag(&o.URLs))
	fs.Func("regions", "`names` of every region sharing the limits, comma-separated, this one included: each gets an even split until the balancer answers", regionsFlag(&o.Regions))
	fs.DurationVar(&o.Interval, "share-interval", 10*time.Second, "how often this gateway reports its busiest keys to the balancer; as the balancer's --interval")
	fs.DurationVar(&o.Stale, "share-stale", share.DefaultStale, "how long region shares stay in force without the balancer; after that every key gets the default share")
}

// shareConfig returns the region share layer's configuration when
// --balancer-url is set, and nil without it.
func shareConfig(opts gatewayOptions) (*share.Config, error) {
	o := opts.Shares
	if len(o.URLs) == 0 {
		if len(o.Regions) > 0 {
			return nil, fmt.Errorf("--regions is set without --balancer-url; region shares need the balancer")
		}
		return nil, nil
	}
	region := regionOf(opts)
	switch {
	case region == "":
		return nil, fmt.Errorf("--balancer-url needs --region (or $%s): the balancer gives shares per region", envRegion)
	case !slices.Contains(o.Regions, region):
		return nil, fmt.Errorf("--region %q is not among --regions %v", region, o.Regions)
	case o.Interval <= 0 || o.Stale <= 0:
		return nil, fmt.Errorf("--share-interval %v and --share-stale %v must be positive", o.Interval, o.Stale)
	}
	return &share.Config{Regions: len(o.Regions), Stale: o.Stale, Interval: o.Interval}, nil
}

// followBalancer keeps s in step with the balancer at --balancer-url and
// reports s's usage to it, until the returned stop function is called.
func followBalancer(s *share.Store, opts gatewayOptions, logger *slog.Logger) (stop func(), err error) {
	o := opts.Shares
	c, err := sharesync.New(sharesync.Config{URLs: o.URLs, Region: regionOf(opts), Gateway: gatewayName(opts), Store: s,
		Token: os.Getenv(envBalancerToken),
		// Polls answer well within the stale timeout, so that a live
		// balancer keeps shares fresh however long it holds a poll.
		Interval: o.Interval, Wait: min(25*time.Second, o.Stale/4), Logger: logger})
	if err != nil {
		return nil, err
	}
	stop = process.Go(c.Run)
	logger.Info("enforcing this region's share of every limit", "region", regionOf(opts), "regions", o.Regions, "balancer", o.URLs)
	return stop, nil
}

// regionOf returns the gateway's region: --region, else $SLUICE_REGION.
func regionOf(opts gatewayOptions) string { return cmp.Or(opts.Region, os.Getenv(envRegion)) }

// gatewayName returns the gateway's ID: --gateway-id, else
// $SLUICE_GATEWAY_ID, else host name and process ID.
func gatewayName(opts gatewayOptions) string {
	if id := cmp.Or(opts.GatewayID, os.Getenv(envGatewayID)); id != "" {
		return id
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "gateway"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}
