package capacity_test

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/capacity"
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
		{"bucket memory", p.BucketBytes, 200e6},
		{"sliding log memory", p.LogBytes, 80e9},
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
	}
	for _, tt := range tests {
		if _, err := capacity.Compute(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compute(%+v): error %v, want one naming %s", tt.in, err, tt.want)
		}
	}
}
