package pipeline_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/share"
)

// TestShares checks that Config.Shares puts the region's share on top of
// the stack, over Redis and in process: every layer below counts the share.
func TestShares(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, tc := range []struct {
		name  string
		redis redisstore.Config
	}{{"redis", redisstore.Config{Addrs: []string{srv.Addr()}}}, {"in process", redisstore.Config{}}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t, pipeline.Config{Redis: tc.redis, Guard: guard.Config{Timeout: calm}, Fleet: limit.Fleet{Gateways: 1}, Shares: &share.Config{Regions: 3}})
			if p.Shares() == nil {
				t.Fatal("got no share layer")
			}
			if err := p.Shares().Set(&share.Table{Version: 1, Default: 250_000}); err != nil {
				t.Fatal(err)
			}
			for _, alg := range limit.Algorithms {
				req := &limit.Request{Key: "k:shares-" + tc.name + "-" + string(alg),
					Limits: []limit.Limit{{Name: "h", Count: 40, Period: time.Hour, Algorithm: alg}}}
				admitted := 0
				for range 40 {
					d, err := p.Take(t.Context(), req)
					if err != nil {
						t.Fatalf("%s: %v", alg, err)
					}
					if d.Allowed {
						admitted++
					}
				}
				if admitted != 10 {
					t.Errorf("%s: got %d admitted, want 10: a quarter of 40", alg, admitted)
				}
			}
		})
	}
	if p := newPipeline(t, pipeline.Config{}); p.Shares() != nil {
		t.Error("got a share layer without Config.Shares")
	}
}

// TestSharesRate drives a region's share of a bucket through the stack over
// Redis on a fake clock, at twice the share's rate for 3 s: it admits the
// share's burst and the share's rate, to the token, with its bucket
// refined to thousandths of a token.
func TestSharesRate(t *testing.T) {
	srv := redistest.Standalone(t)
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}, Now: clock.Now},
		Guard: guard.Config{Timeout: calm}, Fleet: limit.Fleet{Gateways: 1}, NoLeases: true, Shares: &share.Config{Regions: 3, Now: clock.Now}})
	if err := p.Shares().Set(&share.Table{Version: 1, Default: 333_333}); err != nil {
		t.Fatal(err)
	}
	req := &limit.Request{Key: "k:shares-rate", Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second, Burst: 30}}}
	admitted := 0
	for range 3000 / 50 { // one request every 50 ms: 20 a second
		d, err := p.Take(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		clock.Advance(50 * time.Millisecond)
	}
	// A third (333333 ppm) of "10 a second, bursts of 30": a burst of 9
	// and 3.333 a second, so 9 + 9.83 tokens over the 2.95 s from the first
	// request to the last: 18 whole ones. Whole tokens per second would
	// have given 3 a second: 9 + 8.
	if admitted != 18 {
		t.Errorf("got %d admitted, want 18: a burst of 9, then 3.333 a second for 2.95 s", admitted)
	}
}

// TestGiveBackThroughShares takes a region's whole share of a bucket
// through the stack, gives one request's grant back through the pipeline
// and takes again: the grant reaches the scaled bucket the take drew from
// (one more admitted), and giving back more than was taken never lifts the
// bucket above the region's share of its burst.
func TestGiveBackThroughShares(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, tc := range []struct {
		name  string
		redis redisstore.Config
	}{{"redis", redisstore.Config{Addrs: []string{srv.Addr()}}}, {"in process", redisstore.Config{}}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t, pipeline.Config{Redis: tc.redis, Guard: guard.Config{Timeout: calm}, Fleet: limit.Fleet{Gateways: 1},
				NoLeases: true, Shares: &share.Config{Regions: 3}})
			if err := p.Shares().Set(&share.Table{Version: 1, Default: 250_000}); err != nil {
				t.Fatal(err)
			}
			for _, alg := range limit.Algorithms {
				req := &limit.Request{Key: "k:giveback-" + tc.name + "-" + string(alg),
					Limits: []limit.Limit{{Name: "h", Count: 40, Period: time.Hour, Algorithm: alg}}}
				take := func() int {
					n := 0
					for range 40 {
						d, err := p.Take(t.Context(), req)
						if err != nil {
							t.Fatalf("%s: %v", alg, err)
						}
						if d.Allowed {
							n++
						}
					}
					return n
				}
				if got := take(); got != 10 {
					t.Fatalf("%s: got %d admitted, want 10: a quarter of 40", alg, got)
				}
				if err := p.GiveBack(t.Context(), req); err != nil {
					t.Fatalf("%s: give back: %v", alg, err)
				}
				if got := take(); got != 1 {
					t.Errorf("%s: got %d admitted after one give-back, want 1: the grant went elsewhere than the scaled bucket", alg, got)
				}
				for range 20 {
					if err := p.GiveBack(t.Context(), req); err != nil {
						t.Fatalf("%s: give back: %v", alg, err)
					}
				}
				if got := take(); got != 10 {
					t.Errorf("%s: got %d admitted after 20 give-backs, want 10: the region's share of the burst, no more", alg, got)
				}
			}
		})
	}
}
