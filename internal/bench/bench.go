// Package bench drives load at a limiter and measures what it costs: the
// latency of each decision (p50, p99, max) and the throughput, for a
// limit.Store called directly or for an HTTP endpoint such as a gateway.
// It backs `sluice bench`; Go benchmarks cover the same paths in-process.
//
// Runs are bounded both in count and in time, and stop by themselves.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-rl/sluice/limit"
)

// Op is one unit of load: a store decision or an HTTP request. worker and i
// let an op pick its key; it reports whether the limiter allowed it.
type Op func(ctx context.Context, worker, i int) (allowed bool, err error)

// Config bounds a run. The zero value runs 2 workers for 1 second.
type Config struct {
	// Concurrency is how many goroutines issue ops; zero means 2.
	Concurrency int
	// Duration bounds the run's time; zero means 1 s.
	Duration time.Duration
	// MaxOps bounds the run's ops in total; zero means 10 million.
	MaxOps int
}

// Result summarises a run.
type Result struct {
	Ops, Allowed, Refused, Errors int
	Elapsed                       time.Duration
	// Latency percentiles of single ops.
	P50, P90, P99, P999, Max time.Duration
	// FirstError is the first error an op returned, if any.
	FirstError error
}

// Throughput reports ops a second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// String formats the result on one line.
func (r Result) String() string {
	return fmt.Sprintf("%d ops in %v (%.0f/s): %d allowed, %d refused, %d errors; latency p50 %v p90 %v p99 %v p99.9 %v max %v",
		r.Ops, r.Elapsed.Round(time.Millisecond), r.Throughput(), r.Allowed, r.Refused, r.Errors,
		r.P50, r.P90, r.P99, r.P999, r.Max)
}

// Run issues op from cfg.Concurrency goroutines until the duration or the op
// count runs out, or ctx ends, and measures each op.
func Run(ctx context.Context, cfg Config, op Op) Result {
	ctx, cancel, workers, maxOps := bounded(ctx, cfg)
	defer cancel()
	type part struct {
		lat                      []time.Duration
		allowed, refused, errors int
		firstErr                 error
	}
	parts := make([]part, workers)
	per := maxOps / workers
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			p := &parts[w]
			p.lat = make([]time.Duration, 0, min(per, 1<<16))
			for i := 0; i < per && ctx.Err() == nil; i++ {
				t0 := time.Now()
				ok, err := op(ctx, w, i)
				p.lat = append(p.lat, time.Since(t0))
				switch {
				case err != nil:
					if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
						p.lat = p.lat[:len(p.lat)-1] // cut short by the end of the run
						return
					}
					p.errors++
					p.firstErr = cmp.Or(p.firstErr, err)
				case ok:
					p.allowed++
				default:
					p.refused++
				}
			}
		})
	}
	wg.Wait()
	r := Result{Elapsed: time.Since(start)}
	var all []time.Duration
	for _, p := range parts {
		all = append(all, p.lat...)
		r.Allowed += p.allowed
		r.Refused += p.refused
		r.Errors += p.errors
		r.FirstError = cmp.Or(r.FirstError, p.firstErr)
	}
	r.Ops = len(all)
	if len(all) == 0 {
		return r
	}
	slices.Sort(all)
	at := func(q float64) time.Duration { return all[min(len(all)-1, int(q*float64(len(all))))] }
	r.P50, r.P90, r.P99, r.P999, r.Max = at(0.50), at(0.90), at(0.99), at(0.999), all[len(all)-1]
	return r
}

// bounded applies cfg's defaults: it returns ctx cut at the run's duration,
// the number of workers and the most ops to run.
func bounded(ctx context.Context, cfg Config) (context.Context, context.CancelFunc, int, int) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(max(cfg.Duration, 0), time.Second))
	return ctx, cancel, cmp.Or(max(cfg.Concurrency, 0), 2), cmp.Or(max(cfg.MaxOps, 0), 10_000_000)
}

// StoreOp returns an op that takes from store for one of keys distinct keys,
// spread evenly over workers, with the given limits.
func StoreOp(store limit.Store, keys int, limits []limit.Limit) Op {
	keys = max(keys, 1)
	names := make([]string, keys)
	for i := range names {
		names[i] = "k:bench-" + strconv.Itoa(i)
	}
	return func(ctx context.Context, worker, i int) (bool, error) {
		req := limit.Request{Key: names[(worker*7919+i)%keys], Limits: limits}
		d, err := store.Take(ctx, &req)
		return d.Allowed, err
	}
}

// HTTPOp returns an op that sends GET url with one of keys API keys in
// X-API-Key. A 429 counts as refused; any other status of 400 or more, or a
// transport error, as an error.
func HTTPOp(client *http.Client, url string, keys int) Op {
	keys = max(keys, 1)
	return func(ctx context.Context, worker, i int) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("X-API-Key", "bench-"+strconv.Itoa((worker*7919+i)%keys))
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			return false, nil
		case resp.StatusCode >= 400:
			return false, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
		}
		return true, nil
	}
}

// Sources reads a gateway's /metrics at url and returns its decisions so
// far by source (the source label of sluice_gateway_decisions_total), so
// that a run can report where its answers came from.
func Sources(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	out := map[string]float64{}
	for _, m := range mfs["sluice_gateway_decisions_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "source" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

// Shares formats the decisions between two Sources readings as each
// source's share of them: "redis 61.0%, lease 39.0%".
func Shares(before, after map[string]float64) string {
	total := 0.0
	diff := map[string]float64{}
	for src, n := range after {
		if d := n - before[src]; d > 0 {
			diff[src] = d
			total += d
		}
	}
	if total == 0 {
		return "no decisions"
	}
	srcs := slices.Sorted(maps.Keys(diff))
	slices.SortStableFunc(srcs, func(a, b string) int { return cmp.Compare(diff[b], diff[a]) })
	var b strings.Builder
	for i, src := range srcs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.1f%% (%.0f)", src, 100*diff[src]/total, diff[src])
	}
	return b.String()
}
