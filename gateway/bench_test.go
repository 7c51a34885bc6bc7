package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// BenchmarkTake compares one in-process check: a memstore Take of one
// token bucket against golang.org/x/time/rate's Limiter.Allow, the
// single-process baseline. The limits are so high that every call is
// allowed, so both measure the same path.
func BenchmarkTake(b *testing.B) {
	lim := []limit.Limit{{Name: "s", Count: 1_000_000_000, Period: time.Second}}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:key-%d", i)
	}
	b.Run("memstore/serial", func(b *testing.B) {
		s := memstore.New(memstore.Config{})
		req := &limit.Request{Key: keys[0], Limits: lim}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("xrate/serial", func(b *testing.B) {
		l := rate.NewLimiter(1_000_000_000, 1_000_000_000)
		b.ReportAllocs()
		for b.Loop() {
			if !l.Allow() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("memstore/parallel-one-key", func(b *testing.B) {
		s := memstore.New(memstore.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := &limit.Request{Key: keys[0], Limits: lim}
			ctx := context.Background()
			for pb.Next() {
				if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
					b.Error(d, err)
					return
				}
			}
		})
	})
	b.Run("xrate/parallel-one-limiter", func(b *testing.B) {
		l := rate.NewLimiter(1_000_000_000, 1_000_000_000)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !l.Allow() {
					b.Error("refused")
					return
				}
			}
		})
	})
	b.Run("memstore/parallel-1024-keys", func(b *testing.B) {
		s := memstore.New(memstore.Config{})
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := &limit.Request{Limits: lim}
			ctx := context.Background()
			i := int(next.Add(1))
			for pb.Next() {
				i++
				req.Key = keys[i%len(keys)]
				if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
					b.Error(d, err)
					return
				}
			}
		})
	})
}

// benchRules allow far more than a benchmark sends, so every request
// passes and both paths do the same work upstream.
const benchRules = `
rules:
  - scope: default
    limits:
      - {name: s, rate: 1000000, per: 1s}
      - {name: m, rate: 100000000, per: 1m}
`

// proxies starts a loopback upstream, a plain httputil.ReverseProxy in
// front of it, and the limiter on store (nil: memstore) with the same
// upstream behind gateway's proxy; it returns their URLs and a client.
func proxies(b *testing.B, store limit.Store) (plain, limited string, client *http.Client) {
	b.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	b.Cleanup(upstream.Close)
	u := mustURL(b, upstream.URL)
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	b.Cleanup(tr.CloseIdleConnections)

	base := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: tr}
	plainSrv := httptest.NewServer(base)
	b.Cleanup(plainSrv.Close)

	set, err := rules.Parse("bench.yaml", []byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set), Store: store})
	if err != nil {
		b.Fatal(err)
	}
	p := gateway.NewProxy(u, nil)
	p.Transport = tr
	limitedSrv := httptest.NewServer(lim.Middleware(p))
	b.Cleanup(limitedSrv.Close)

	ctr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	b.Cleanup(ctr.CloseIdleConnections)
	return plainSrv.URL, limitedSrv.URL, &http.Client{Transport: ctr}
}

// roundTrip sends one GET with an API key and drains the answer.
func roundTrip(client *http.Client, url, key string) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// percentile returns the p-th percentile (0 to 1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(p*float64(len(sorted))), len(sorted)-1)]
}

// BenchmarkAddedLatency measures what the limiter adds to a proxied
// request: each iteration sends one request through the plain proxy and
// one through limiter and proxy, alternating, so both see the same machine
// at the same moment. It reports each path's p50 and p99 and their
// difference in microseconds, with the in-process store and with a local
// redis-server behind the production stack (pipeline.New: leases, guard,
// store), as the gateway binary runs it.
func BenchmarkAddedLatency(b *testing.B) {
	b.Run("memstore", func(b *testing.B) { benchAddedLatency(b, nil) })
	b.Run("redis", func(b *testing.B) {
		s, err := pipeline.New(context.Background(), pipeline.Config{
			Redis: redisstore.Config{Addrs: []string{redistest.Standalone(b).Addr()}}, Fleet: limit.Fleet{Gateways: 1},
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		benchAddedLatency(b, s)
	})
}

func benchAddedLatency(b *testing.B, store limit.Store) {
	plain, limited, client := proxies(b, store)
	var tp, tl []time.Duration
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		key := fmt.Sprintf("key-%d", i%1000)
		i++
		start := time.Now()
		if err := roundTrip(client, plain+"/v1/items", key); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := roundTrip(client, limited+"/v1/items", key); err != nil {
			b.Fatal(err)
		}
		tp, tl = append(tp, mid.Sub(start)), append(tl, time.Since(mid))
	}
	slices.Sort(tp)
	slices.Sort(tl)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(percentile(tp, .5)), "plain-p50-µs")
	b.ReportMetric(us(percentile(tp, .99)), "plain-p99-µs")
	b.ReportMetric(us(percentile(tl, .5)), "limited-p50-µs")
	b.ReportMetric(us(percentile(tl, .99)), "limited-p99-µs")
	b.ReportMetric(us(percentile(tl, .5)-percentile(tp, .5)), "added-p50-µs")
	b.ReportMetric(us(percentile(tl, .99)-percentile(tp, .99)), "added-p99-µs")
}

// BenchmarkThroughput measures requests a second through the plain proxy
// and through limiter and proxy, with 8 concurrent loopback clients. The
// two paths take turns in rounds of 256 requests, so both see the same
// machine at the same moments; it reports each path's rate and limited/plain.
func BenchmarkThroughput(b *testing.B) {
	plain, limited, client := proxies(b, nil)
	const workers, round = 8, 256
	// burst sends n requests to url from the workers and returns how long
	// they took.
	burst := func(url string, n int, seq *atomic.Int64) time.Duration {
		var left atomic.Int64
		left.Store(int64(n))
		start := time.Now()
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					if err := roundTrip(client, url+"/v1/items", fmt.Sprintf("key-%d", seq.Add(1)%1000)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var seq atomic.Int64
	burst(plain, 2*round, &seq) // open the connections first
	burst(limited, 2*round, &seq)
	var tp, tl time.Duration
	sent := 0
	b.ReportAllocs()
	for b.Loop() {
		// One iteration is one request on each path; they go in rounds.
		sent++
		if sent%round == 0 {
			tp += burst(plain, round, &seq)
			tl += burst(limited, round, &seq)
		}
	}
	if tp == 0 || tl == 0 {
		return
	}
	n := float64(sent - sent%round)
	b.ReportMetric(n/tp.Seconds(), "plain-req/s")
	b.ReportMetric(n/tl.Seconds(), "limited-req/s")
	b.ReportMetric(tp.Seconds()/tl.Seconds(), "limited/plain")
}

// BenchmarkMiddleware measures the limiter's own work per request, with no
// network: identity, rule resolution, a memstore Take and the headers,
// around a handler that does nothing.
func BenchmarkMiddleware(b *testing.B) {
	set, err := rules.Parse("bench.yaml", []byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set)})
	if err != nil {
		b.Fatal(err)
	}
	h := lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	newReq := func(i int) *http.Request {
		r := httptest.NewRequest("GET", "/v1/items", nil)
		r.Header.Set("X-API-Key", fmt.Sprintf("key-%d", i))
		return r
	}
	// The check alone, as an embedding program calls it, into a response
	// whose header map is reused: the limiter's own cost per request, two
	// limits on the in-process store, without the test recorder's.
	b.Run("check", func(b *testing.B) { checkLoop(b, lim, newReq(0)) })
	// The same with a shadow rule tried out beside them: its limit is
	// checked in the same store call as the enforced ones.
	b.Run("check-shadow", func(b *testing.B) {
		shadowed, err := rules.Parse("shadow.yaml", []byte(benchRules+`
  - scope: default
    mode: shadow
    limits: [{name: s, rate: 500000, per: 1s}]
`))
		if err != nil {
			b.Fatal(err)
		}
		lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(shadowed)})
		if err != nil {
			b.Fatal(err)
		}
		checkLoop(b, lim, newReq(0))
	})
	b.Run("serial", func(b *testing.B) {
		r := newReq(0)
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
	b.Run("parallel-1024-keys", func(b *testing.B) {
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			reqs := make([]*http.Request, 1024)
			for i := range reqs {
				reqs[i] = newReq(i)
			}
			i := int(next.Add(1))
			for pb.Next() {
				i++
				w := httptest.NewRecorder()
				h.ServeHTTP(w, reqs[i%len(reqs)])
				if w.Code != http.StatusOK {
					b.Errorf("status %d", w.Code)
					return
				}
			}
		})
	})
	// A client far over its limit, logged as JSON: the cost of a refusal,
	// problem document and decision log sampling included.
	b.Run("refused", func(b *testing.B) {
		tight, err := rules.Parse("tight.yaml", []byte("rules: [{scope: default, limits: [{name: s, rate: 1, per: 1h}]}]"))
		if err != nil {
			b.Fatal(err)
		}
		lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(tight), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		h := lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := newReq(0)
		h.ServeHTTP(httptest.NewRecorder(), r)
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusTooManyRequests {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}

// reusedWriter is a ResponseWriter whose header map a benchmark clears and
// reuses, so that only the limiter's own allocations are counted.
type reusedWriter struct{ h http.Header }

func (w *reusedWriter) Header() http.Header         { return w.h }
func (w *reusedWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *reusedWriter) WriteHeader(int)             {}
