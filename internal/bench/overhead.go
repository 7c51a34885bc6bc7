package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Pairs configures RunPairs. The zero value runs 2 workers for 1 second as
// fast as they can.
type Pairs struct {
	// Rate is how many pairs a second to start, on a fixed schedule whoever
	// answers (open loop); zero sends each pair as soon as the worker's last
	// is back (closed loop), which measures capacity.
	Rate float64
	// Concurrency is how many goroutines send pairs; zero means 2. With a
	// Rate it bounds the pairs in flight.
	Concurrency int
	// Duration bounds the run's time; zero means 1 s.
	Duration time.Duration
	// MaxPairs bounds the pairs sent; zero means 10 million.
	MaxPairs int
}

// Percentiles are three points of a latency distribution.
type Percentiles struct{ P50, P99, P999 time.Duration }

// PairsResult is what RunPairs measured.
type PairsResult struct {
	// Rate is the schedule asked for, zero for closed loop.
	Rate float64
	// Pairs is how many pairs both of whose ops succeeded; Errors counts
	// the others.
	Pairs, Errors int
	Elapsed       time.Duration
	// A and B are the latencies of each side; Added is B's percentiles
	// less A's; Paired are the percentiles of each pair's difference, B
	// less A, measured back to back.
	A, B, Added, Paired Percentiles
	// Late is the 99th percentile of how late the load generator started a
	// pair against its schedule: when it is not small against the
	// latencies, the generator could not keep the rate.
	Late       time.Duration
	FirstError error
}

// Throughput reports pairs a second.
func (r PairsResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Pairs) / r.Elapsed.Seconds()
}

// RunPairs sends the same load down two paths side by side: each pair is
// one op of a then one of b (in alternating order, so that neither gains
// from going first), from one worker, back to back, so that both see the
// machine in the same state. It stops when the duration or the pair count
// runs out, or ctx ends.
func RunPairs(ctx context.Context, cfg Pairs, a, b Op) PairsResult {
	// A pair started inside the run finishes even if the run's time ends
	// halfway through it: the ops get the caller's context, not the timed
	// one, so no side is counted without the other.
	opCtx := ctx
	ctx, cancel, workers, maxPairs := bounded(ctx, Config{Concurrency: cfg.Concurrency, Duration: cfg.Duration, MaxOps: cfg.MaxPairs})
	defer cancel()
	type part struct {
		a, b, diff, late []time.Duration
		errors           int
		firstErr         error
	}
	parts := make([]part, workers)
	var next atomic.Int64
	start := time.Now()
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			p := &parts[w]
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= maxPairs {
					return
				}
				if interval > 0 {
					due := start.Add(time.Duration(k) * interval)
					if wait := time.Until(due); wait > 0 {
						select {
						case <-time.After(wait):
						case <-ctx.Done():
							return
						}
					}
					p.late = append(p.late, time.Since(due))
				}
				first, second := a, b
				if k%2 == 1 {
					first, second = b, a
				}
				t0 := time.Now()
				_, err1 := first(opCtx, w, k)
				t1 := time.Now()
				_, err2 := second(opCtx, w, k)
				t2 := time.Now()
				if err := errors.Join(err1, err2); err != nil {
					if opCtx.Err() != nil {
						return // cut short by the caller
					}
					p.errors++
					p.firstErr = cmp.Or(p.firstErr, err)
					continue
				}
				la, lb := t1.Sub(t0), t2.Sub(t1)
				if k%2 == 1 {
					la, lb = lb, la
				}
				p.a, p.b, p.diff = append(p.a, la), append(p.b, lb), append(p.diff, lb-la)
			}
		})
	}
	wg.Wait()
	r := PairsResult{Rate: cfg.Rate, Elapsed: time.Since(start)}
	var as, bs, diffs, late []time.Duration
	for _, p := range parts {
		as, bs, diffs, late = append(as, p.a...), append(bs, p.b...), append(diffs, p.diff...), append(late, p.late...)
		r.Errors += p.errors
		r.FirstError = cmp.Or(r.FirstError, p.firstErr)
	}
	r.Pairs = len(as)
	if r.Pairs == 0 {
		return r
	}
	r.A, r.B, r.Paired = percentiles(as), percentiles(bs), percentiles(diffs)
	r.Added = Percentiles{r.B.P50 - r.A.P50, r.B.P99 - r.A.P99, r.B.P999 - r.A.P999}
	if len(late) > 0 {
		slices.Sort(late)
		r.Late = late[min(len(late)-1, int(0.99*float64(len(late))))]
	}
	return r
}

// percentiles sorts d and reads its p50, p99 and p99.9.
func percentiles(d []time.Duration) Percentiles {
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Percentiles{at(0.50), at(0.99), at(0.999)}
}

// WritePairs writes r as a small table: a row per side named nameA and
// nameB, then the added latency and the paired differences.
func WritePairs(w io.Writer, r PairsResult, nameA, nameB string) {
	sched := "closed loop"
	if r.Rate > 0 {
		sched = fmt.Sprintf("%.0f pairs/s asked, started late by at most %v at p99", r.Rate, micros(r.Late))
	}
	fmt.Fprintf(w, "%d pairs in %v (%.0f/s; %s), %d errors\n", r.Pairs, r.Elapsed.Round(time.Millisecond), r.Throughput(), sched, r.Errors)
	width := max(len(nameA), len(nameB), len("added (p - p)"))
	fmt.Fprintf(w, "  %-*s %10s %10s %10s\n", width, "", "p50", "p99", "p99.9")
	for _, row := range []struct {
		name string
		p    Percentiles
	}{{nameA, r.A}, {nameB, r.B}, {"added (p - p)", r.Added}, {"paired diff", r.Paired}} {
		fmt.Fprintf(w, "  %-*s %10s %10s %10s\n", width, row.name, micros(row.p.P50), micros(row.p.P99), micros(row.p.P999))
	}
}

// micros formats d in milliseconds with microsecond precision: "0.412ms".
func micros(d time.Duration) string {
	s := fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
	return strings.Replace(s, "-0.000ms", "0.000ms", 1)
}
