package capacity_test

import (
	"math"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/capacity"
	"github.com/sluice-rl/sluice/limit"
)

// The reference design's own figures: 1M requests a second at peak.
func TestReferenceFigures(t *testing.T) {
	p, err := capacity.Compute(capacity.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want float64
	}{
		{"gateways", float64(p.Gateways), 334},
		{"script calls", p.ScriptCalls, 1_000_000},
		{"shards", float64(p.Shards), 20},
		{"shards with room", float64(p.ShardsWithRoom), 32},
		{"bucket memory (token bucket, 196 B measured)", p.BucketBytes, 392e6},
		{"sliding log memory (10.6 B an entry measured)", p.LogBytes, 10.6e9},
		{"gcra memory", p.MemoryByAlgorithm[limit.GCRA], 340e6},
		{"busy key's calls", p.BusyKeyCalls, 100_000.0 / 29},
		{"busy key's shard load", p.BusyKeyLoad, 100_000.0 / 29 / 50_000},
		{"storm without the refusal cache", p.StormCalls, 30e6},
		{"storm with it (model)", p.StormCallsCached, 3340 + 100_000.0/29},
		{"bandwidth", p.Bandwidth, 250e6},
		{"lease batch", float64(p.LeaseBatch), 29},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestTenTimesTraffic(t *testing.T) {
	full, err := capacity.Compute(capacity.Inputs{PeakRPS: 10_000_000})
	if err != nil {
		t.Fatal(err)
	}
	leased, err := capacity.Compute(capacity.Inputs{PeakRPS: 10_000_000, RedisShare: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if full.Shards != 200 || leased.Shards != 20 {
		t.Errorf("10x traffic: %d shards with every request calling Redis, %d with leases; want 200 and 20", full.Shards, leased.Shards)
	}
}

func TestBadInputsNamed(t *testing.T) {
	tests := []struct {
		in   capacity.Inputs
		want string
	}{
		{capacity.Inputs{PeakRPS: -1}, "peak-rps"},
		{capacity.Inputs{GatewayBusy: 1.5}, "gateway-busy"},
		{capacity.Inputs{RedisShare: 2}, "redis-share"},
		{capacity.Inputs{Algorithm: "leaky"}, `"leaky"`},
		{capacity.Inputs{StormCachedShare: -0.5}, "storm cached share"},
	}
	for _, tt := range tests {
		if _, err := capacity.Compute(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compute(%+v): error %v, want one naming %s", tt.in, err, tt.want)
		}
	}
}

func TestMemoryFollowsTheAlgorithm(t *testing.T) {
	tests := []struct {
		alg  limit.Algorithm
		want float64
	}{
		{limit.TokenBucket, 392e6}, {limit.GCRA, 340e6}, {limit.SlidingWindow, 404e6},
		{limit.FixedWindow, 404e6}, {limit.SlidingLog, 1e6 * 2 * 1000 * 10.6},
	}
	for _, tt := range tests {
		p, err := capacity.Compute(capacity.Inputs{Algorithm: tt.alg})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(p.BucketBytes-tt.want) > 1 {
			t.Errorf("%s: bucket memory %v, want %v", tt.alg, p.BucketBytes, tt.want)
		}
	}
}

func TestMeasuredStormShare(t *testing.T) {
	p, err := capacity.Compute(capacity.Inputs{StormCachedShare: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	if p.StormCallsCached != 0.02*p.StormCalls {
		t.Errorf("storm with the cache: %v calls/s, want 2%% of %v", p.StormCallsCached, p.StormCalls)
	}
}

func TestRelayAtOneHundredTimes(t *testing.T) {
	tests := []struct {
		name       string
		in         capacity.Inputs
		perDC      int
		batch      int
		breaks     int
		busyBelow1 bool // the busiest key fits its shard through relays
	}{
		{"today", capacity.Inputs{RedisShare: 0.1}, 2, 1666, 0, true},
		{"100x", capacity.Inputs{PeakRPS: 1e8, RedisShare: 0.1}, 34, 98, 2, true},
		{"100x, one data centre", capacity.Inputs{PeakRPS: 1e8, RedisShare: 0.1, DataCentres: 1}, 100, 100, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := capacity.Compute(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if p.Relay.PerDC != tt.perDC || p.Relay.Batch != tt.batch || len(p.Breaks) != tt.breaks {
				t.Errorf("got %d relays a data centre, batch %d, %d breaks %q; want %d, %d, %d",
					p.Relay.PerDC, p.Relay.Batch, len(p.Breaks), p.Breaks, tt.perDC, tt.batch, tt.breaks)
			}
			if got := p.Relay.BusyKeyLoad < 1; got != tt.busyBelow1 {
				t.Errorf("busiest key through relays: %.2f of a shard", p.Relay.BusyKeyLoad)
			}
		})
	}
}
