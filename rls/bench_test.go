package rls_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rules"
)

// benchKeys is how many callers the end-to-end benchmarks spread requests
// over: enough that most requests go to Redis rather than to leases.
const benchKeys = 10000

// BenchmarkDecision compares one decision through the gRPC service with
// one through the gateway, each a real client over loopback to a real
// server over the same store stack on one Redis, with one token bucket
// per caller. It reports decisions a second and the p50 and p99 latency
// a client sees.
func BenchmarkDecision(b *testing.B) {
	addr := redistest.Standalone(b).Addr()
	s := serve(b, `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
`, pipelineStore(b, []string{addr}, pipeline.Config{}))
	grpcDecision := func(i int) error {
		resp, err := s.client.ShouldRateLimit(context.Background(),
			&rlsv3.RateLimitRequest{Domain: "bench", Descriptors: ds(desc("user", strconv.Itoa(i%benchKeys)))})
		if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			err = fmt.Errorf("answer %v, want OK", resp.GetOverallCode())
		}
		return err
	}

	set, err := rules.Parse("bench.yaml", []byte(`
rules:
  - scope: default
    limits: [{name: s, rate: 1000000, per: 1s}]
`))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := gateway.New(gateway.Config{Store: pipelineStore(b, []string{addr}, pipeline.Config{}), Rules: gateway.StaticRules(set)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	b.Cleanup(srv.Close)
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	httpDecision := func(i int) error {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-API-Key", "key-"+strconv.Itoa(i%benchKeys))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d, want 200", resp.StatusCode)
		}
		return nil
	}

	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("rls-grpc/clients=%d", clients), func(b *testing.B) { measure(b, clients, grpcDecision) })
		b.Run(fmt.Sprintf("gateway-http/clients=%d", clients), func(b *testing.B) { measure(b, clients, httpDecision) })
	}
}

// measure runs do b.N times from clients concurrent clients and reports
// decisions a second and the latency percentiles they saw.
func measure(b *testing.B, clients int, do func(i int) error) {
	b.ReportAllocs()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		lat  = make([]time.Duration, b.N)
	)
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				t := time.Now()
				if err := do(i); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[b.N/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[b.N*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(0, "ns/op") // the decisions a second say it, for all clients
}

// BenchmarkShouldRateLimit is the service's own cost, in process: three
// descriptors, one nested, over the in-process store.
func BenchmarkShouldRateLimit(b *testing.B) {
	b.ReportAllocs()
	rules, _, err := rls.ParseRules("bench.yaml", []byte(`
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 100000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := rls.New(rls.Config{Store: memstore.New(memstore.Config{}), Rules: rules})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: ds(desc("remote_address", "10.0.0.1"),
		desc("path", "/api/users"), desc("tenant", "acme", "user", "alice"))}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Errorf("got %v, %v; want OK", resp.GetOverallCode(), err)
				return
			}
		}
	})
}

// BenchmarkDistinctValues shows what the in-process store pays for keeping
// a domain's counters under one key: it looks a descriptor's counter up
// among every counter of the domain still live (docs/envoy.md).
func BenchmarkDistinctValues(b *testing.B) {
	rules, _, err := rls.ParseRules("bench.yaml", []byte("domain: d\ndescriptors: [{key: ip, rate_limit: {unit: minute, requests_per_unit: 1000000}}]\n"))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10, 1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			svc, err := rls.New(rls.Config{Store: memstore.New(memstore.Config{}), Rules: rules})
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([]*rlsv3.RateLimitRequest, n)
			for i := range reqs {
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds(desc("ip", strconv.Itoa(i)))}
			}
			for i := 0; b.Loop(); i++ {
				if _, err := svc.ShouldRateLimit(context.Background(), reqs[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
