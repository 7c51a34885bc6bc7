package pipeline_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
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
			p := newPipeline(t, pipeline.Config{Redis: tc.redis, Timeout: calm, Gateways: 1, Shares: &share.Config{Regions: 3}})
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
