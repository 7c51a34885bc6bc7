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

// benchRelayOptions are sluice bench --relay's settings.
type benchRelayOptions struct {
	redis              []string
	local, allowRemote bool
	gateways, relays   int
	rate               float64
	workers            int
	duration           time.Duration
}

// runBenchRelay runs the relay bench and prints both modes side by side.
func runBenchRelay(ctx context.Context, o benchRelayOptions, stdout io.Writer) error {
	if o.duration <= 0 || o.duration > 5*time.Minute {
		return fmt.Errorf("bench: --duration %v: a relay run is bounded; want up to 5m", o.duration)
	}
	if o.relays < 1 || !(o.rate > 0) {
		return fmt.Errorf("bench: --relays %d and --relay-rate %v: want at least 1 and a positive rate", o.relays, o.rate)
	}
	addrs := o.redis
	switch {
	case o.local:
		s, stop, err := redistest.NewStandalone()
		if err != nil {
			return fmt.Errorf("bench: --local: %w", err)
		}
		defer stop()
		addrs = []string{s.Addr()}
	case len(addrs) == 0:
		return fmt.Errorf("bench: --relay needs --local or --redis")
	case !o.allowRemote:
		if err := bench.Loopback(addrs); err != nil {
			return err
		}
	}
	res, err := bench.RelayScale(ctx, bench.RelayConfig{Addrs: addrs, Gateways: o.gateways, Relays: o.relays, Rate: o.rate, Workers: o.workers, Duration: o.duration})
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
