package pipeline_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// BenchmarkKinds times each new kind of limit of issue 22 beside the plain
// token bucket, through one pipeline on one Redis in the same run, from
// parallel goroutines over 1000 keys of one org, and reports the Redis
// commands each decision cost:
//
//   - token-bucket: a key's one limit (leases on), the baseline
//
//   - token-bucket-no-leases: the same, one script call per decision
//
//   - org: the key's limit and its org's, one call under the org's tag
//
//   - quota-batched: a daily quota counted in batches (flush every 2 s)
//
//   - window-1d: the same daily count as a per: 1d fixed window limit,
//     checked in Redis per request (the way before quotas)
//
//   - concurrency: a slot taken and released (two calls)
//
//     go test -run '^$' -bench Kinds -benchtime 2s ./pipeline
func BenchmarkKinds(b *testing.B) {
	srv := redistest.Standalone(b)
	cfg := pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: 1}}
	p, err := pipeline.New(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	cfg.NoLeases = true
	bare, err := pipeline.New(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()

	doc := "keys:\n"
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key_%04d", i)
		doc += "  " + keys[i] + ": {plan: pro, org: acme}\n"
	}
	doc += `rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 1000000, per: 1s}]
  - scope: org
    match: {org: acme}
    limits: [{name: s, rate: 100000000, per: 1s}]
`
	set, err := rules.Parse("bench.yaml", []byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	bucket := []limit.Limit{{Name: "s", Count: 1_000_000, Period: time.Second}}
	window := []limit.Limit{{Name: "d", Count: 1 << 25, Period: 24 * time.Hour, Algorithm: limit.FixedWindow}}
	qs := []quota.Quota{{Name: "d", Count: 1 << 25, Period: quota.Day}}
	now := time.Now()
	take := func(b *testing.B, s limit.Store, req *limit.Request) {
		if d, err := s.Take(b.Context(), req); err != nil || !d.Allowed {
			b.Fatalf("take: %+v, %v", d, err)
		}
	}
	for _, tc := range []struct {
		name string
		do   func(b *testing.B, i int)
	}{
		{"token-bucket", func(b *testing.B, i int) {
			take(b, p, &limit.Request{Key: "k:" + keys[i%len(keys)], Limits: bucket})
		}},
		{"token-bucket-no-leases", func(b *testing.B, i int) {
			take(b, bare, &limit.Request{Key: "k:" + keys[i%len(keys)], Limits: bucket})
		}},
		{"org", func(b *testing.B, i int) {
			k := keys[i%len(keys)]
			res := set.Resolve(now, rules.Query{APIKey: k})
			var buf [4]limit.Limit
			take(b, p, &limit.Request{Key: res.StoreKey("k:" + k), Limits: res.AppendStoreLimits(buf[:0], k)})
		}},
		{"quota-batched", func(b *testing.B, i int) {
			if d, err := p.Quotas().Take(b.Context(), "k:"+keys[i%len(keys)], qs, 1); err != nil || !d.Allowed {
				b.Fatalf("quota: %+v, %v", d, err)
			}
		}},
		{"window-1d", func(b *testing.B, i int) {
			take(b, p, &limit.Request{Key: "k:" + keys[i%len(keys)], Limits: window})
		}},
		{"concurrency", func(b *testing.B, i int) {
			slot, d := p.Slots().Acquire(b.Context(), "k:"+keys[i%len(keys)], 1000, false)
			if !d.Allowed {
				b.Fatalf("slot refused: %+v", d)
			}
			slot.Release()
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cmds := []string{"fcall", "evalsha", "eval", "incrby", "get", "pexpireat", "zrem"}
			before := commandCalls(b, []*redistest.Server{srv}, cmds...)
			defer func() {
				b.ReportMetric(float64(commandCalls(b, []*redistest.Server{srv}, cmds...)-before)/float64(b.N), "redis-cmds/op")
			}()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					i++
					tc.do(b, i)
				}
			})
		})
	}
}
