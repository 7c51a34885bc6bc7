package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/internal/bench"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// runBenchRelay runs the relay bench over cfg.Addrs, or a redis-server
// it starts with local, and prints both modes side by side.
func runBenchRelay(ctx context.Context, cfg bench.RelayConfig, local, allowRemote bool, stdout io.Writer) error {
	if cfg.Duration <= 0 || cfg.Duration > 5*time.Minute {
		return fmt.Errorf("bench: --duration %v: a relay run is bounded; want up to 5m", cfg.Duration)
	}
	if cfg.Relays < 1 || !(cfg.Rate > 0) {
		return fmt.Errorf("bench: --relays %d and --relay-rate %v: want at least 1 and a positive rate", cfg.Relays, cfg.Rate)
	}
	switch {
	case local:
		s, stop, err := redistest.NewStandalone()
		if err != nil {
			return fmt.Errorf("bench: --local: %w", err)
		}
		defer stop()
		cfg.Addrs = []string{s.Addr()}
	case len(cfg.Addrs) == 0:
		return fmt.Errorf("bench: --relay needs --local or --redis")
	case !allowRemote:
		if err := bench.Loopback(cfg.Addrs); err != nil {
			return err
		}
	}
	res, err := bench.RelayScale(ctx, cfg)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "mode\trequests\terrors\tredis calls\tcalls/request\tbusy key asked\tits calls/request\tadmitted\tallowed\tbatch\tpast relays\t")
	for _, r := range res {
		batch := r.GatewayBatch
		if r.Mode == "relay" {
			batch = r.RelayBatch
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.4f\t%.1fx\t%.4f\t%d\t%d\t%d\t%d\t\n", r.Mode, r.Requests, r.Errors, r.RedisCalls, r.CallsPerRequest(),
			r.HotMultiple(), r.HotCallsPerRequest(), r.HotAdmitted, r.HotAllowed, batch, r.DirectCalls)
	}
	if len(res) == 2 && res[0].CallsPerRequest() > 0 && res[0].HotCallsPerRequest() > 0 {
		fmt.Fprintf(w, "relay/direct calls a request: all keys %.3f, busy key %.3f\n", res[1].CallsPerRequest()/res[0].CallsPerRequest(),
			res[1].HotCallsPerRequest()/res[0].HotCallsPerRequest())
	}
	return w.Flush()
}
