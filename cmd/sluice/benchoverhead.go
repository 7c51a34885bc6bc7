package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/bench"
	"github.com/sluice-rl/sluice/internal/process"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/rules"
)

// overheadOptions are what `sluice bench --overhead` measures with.
type overheadOptions struct {
	upstream    string    // empty: an upstream started in process
	at          []float64 // pairs a second; empty: half the capacity and the capacity
	concurrency int
	duration    time.Duration
	maxPairs    int
	keys        int
	rate        int64 // each key's limit a second
	pipeline    pipeline.Config
}

// parseRates reads --at: pair rates a second, comma-separated.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range commaList(s) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("--at %q: want positive rates a second, comma-separated", s)
		}
		out = append(out, r)
	}
	return out, nil
}

// runOverhead measures what the limiter adds to a request: the same GETs
// sent to the upstream directly and through a gateway started in this
// process over opts.pipeline's store, in pairs side by side. It measures
// the capacity first (pairs as fast as the workers go), then pairs on a
// fixed schedule at half of it and at it (or at the --at rates), and writes
// each phase's percentiles and their differences to w. Everything it sends
// stays on loopback.
func runOverhead(ctx context.Context, opts overheadOptions, w io.Writer) error {
	upstreamURL := opts.upstream
	if upstreamURL == "" {
		stop, u, err := serveLoopback(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"ok":true}`)
		}))
		if err != nil {
			return fmt.Errorf("bench: start the upstream: %w", err)
		}
		defer stop()
		upstreamURL = u
	}
	up, err := url.Parse(upstreamURL)
	if err != nil || up.Scheme != "http" || !loopback(up.Hostname()) {
		return fmt.Errorf("bench: --upstream %q: want an http URL on a loopback address (127.0.0.0/8, ::1 or localhost)", upstreamURL)
	}

	store, err := pipeline.New(ctx, opts.pipeline)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer store.Close()
	set, err := rules.Parse("bench", fmt.Appendf(nil, "rules: [{scope: default, limits: [{name: s, rate: %d, per: 1s, burst: %d}, {name: m, rate: %d, per: 1m}]}]",
		opts.rate, 2*opts.rate, 50*opts.rate))
	if err != nil {
		return fmt.Errorf("bench: rules: %w", err)
	}
	var sources sourceCounts
	lim, err := gateway.New(gateway.Config{Store: store, Rules: gateway.StaticRules(set), OnDecision: sources.add})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	stopGateway, gatewayURL, err := serveLoopback(lim.Middleware(gateway.NewProxy(up, nil)))
	if err != nil {
		return fmt.Errorf("bench: start the gateway: %w", err)
	}
	defer stopGateway()

	fmt.Fprintf(w, "overhead: GET %s directly and through a gateway in this process counting in %s;\n", upstreamURL, stackName(opts.pipeline))

	// A kept connection for each worker, so that no request pays for a new
	// one.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: opts.concurrency}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	fmt.Fprintf(w, "%d keys, each limited to %d a second; %d workers, each sending pairs of one request of each, back to back\n",
		opts.keys, opts.rate, opts.concurrency)
	direct, limited := bench.HTTPOp(client, upstreamURL, opts.keys), bench.HTTPOp(client, gatewayURL, opts.keys)
	phase := func(title string, rate float64) (bench.PairsResult, error) {
		before := sources.snapshot()
		r := bench.RunPairs(ctx, bench.Pairs{Rate: rate, Concurrency: opts.concurrency, Duration: opts.duration, MaxPairs: opts.maxPairs}, direct, limited)
		fmt.Fprintf(w, "\n%s\n", title)
		bench.WritePairs(w, r, "direct", "gateway")
		fmt.Fprintf(w, "  gateway decisions: %s\n", bench.Shares(before, sources.snapshot()))
		if r.Errors > 0 {
			return r, fmt.Errorf("bench: %d pairs failed; first: %w", r.Errors, r.FirstError)
		}
		if r.Pairs == 0 {
			return r, errors.New("bench: no pair completed")
		}
		return r, nil
	}
	rates := opts.at
	if len(rates) == 0 {
		c, err := phase("capacity: pairs as fast as the workers go (closed loop)", 0)
		if err != nil {
			return err
		}
		rates = []float64{c.Throughput() / 2, c.Throughput()}
	}
	for i, rate := range rates {
		title := fmt.Sprintf("at %.0f pairs a second", rate)
		if len(opts.at) == 0 {
			title += [...]string{" (half the capacity)", " (the capacity)"}[i]
		}
		if _, err := phase(title, rate); err != nil {
			return err
		}
	}
	return nil
}

// serveLoopback serves h on a free loopback port until stop is called.
func serveLoopback(h http.Handler) (stop func(), url string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := process.NewServer(h, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return func() { srv.Close(); <-done }, "http://" + ln.Addr().String(), nil
}

// loopback reports whether host is a loopback address or localhost.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// sourceCounts counts a gateway's enforced decisions by source, from
// OnDecision.
type sourceCounts struct {
	mu sync.Mutex
	n  map[string]float64 // guarded by mu
}

func (s *sourceCounts) add(e gateway.Event) {
	if e.Shadow || e.Err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]float64{}
	}
	s.n[string(e.Decision.Source)]++
}

func (s *sourceCounts) snapshot() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.n)
}
