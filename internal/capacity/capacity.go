// Package capacity sizes a sluice deployment from traffic figures: how many
// gateways, how many Redis shards, how much memory and bandwidth. It is the
// arithmetic of the reference design's "numbers that decide it", as a pure
// function, so `sluice plan` can answer "what if traffic were ten times
// higher" without anyone redoing it by hand.
package capacity

import (
	"fmt"
	"math"
	"math/bits"
)

// Inputs are the figures a plan starts from. The zero value of each field
// means the default shown in its comment, which are the reference design's
// assumptions.
type Inputs struct {
	PeakRPS          float64 // API requests a second at peak; 1,000,000
	GatewayRPS       float64 // requests a second one gateway handles; 5,000
	GatewayBusy      float64 // target utilisation of the gateway fleet; 0.6
	RedisShare       float64 // share of requests that call Redis; 1 (0.1 with leases)
	ScriptsPerShard  float64 // limiter scripts a second one shard runs safely; 50,000
	ActiveKeys       float64 // API keys active in an hour; 1,000,000
	RulesPerKey      float64 // limits per key; 2
	BytesPerBucket   float64 // Redis memory of one bucket; 100
	LimitPerMinute   float64 // a typical limit, requests a minute; 1,000
	BytesPerLogEntry float64 // Redis memory of one sliding-log entry; 80
	BytesPerCall     float64 // request and reply of one script call; 250
	BusyKeyRPS       float64 // the limit of the busiest key, a second; 100,000
}

// Plan is what the inputs imply.
type Plan struct {
	Inputs Inputs // with defaults filled in
	// Gateways is the fleet size at the target utilisation.
	Gateways int
	// ScriptCalls is the Redis script calls a second at peak.
	ScriptCalls float64
	// Shards is the least number of shards that carries ScriptCalls;
	// ShardsWithRoom rounds 1.5 times that up to a power of two.
	Shards, ShardsWithRoom int
	// BucketBytes is the Redis memory of every token bucket; LogBytes what
	// a sliding window log would need instead.
	BucketBytes, LogBytes float64
	// Bandwidth is limiter traffic to Redis in bytes a second.
	Bandwidth float64
	// LeaseBatch is the batch a gateway leases for the busiest key: its
	// share of 100 ms of the limit.
	LeaseBatch int
	// BusyKeyCalls is the script calls a second the busiest key costs its
	// shard with leases (without them it is BusyKeyRPS).
	BusyKeyCalls float64
}

func orDefault(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

// Compute fills in defaults and works out the plan. It refuses inputs that
// cannot describe a deployment, naming the field.
func Compute(in Inputs) (Plan, error) {
	in.PeakRPS = orDefault(in.PeakRPS, 1_000_000)
	in.GatewayRPS = orDefault(in.GatewayRPS, 5_000)
	in.GatewayBusy = orDefault(in.GatewayBusy, 0.6)
	in.RedisShare = orDefault(in.RedisShare, 1)
	in.ScriptsPerShard = orDefault(in.ScriptsPerShard, 50_000)
	in.ActiveKeys = orDefault(in.ActiveKeys, 1_000_000)
	in.RulesPerKey = orDefault(in.RulesPerKey, 2)
	in.BytesPerBucket = orDefault(in.BytesPerBucket, 100)
	in.LimitPerMinute = orDefault(in.LimitPerMinute, 1_000)
	in.BytesPerLogEntry = orDefault(in.BytesPerLogEntry, 80)
	in.BytesPerCall = orDefault(in.BytesPerCall, 250)
	in.BusyKeyRPS = orDefault(in.BusyKeyRPS, 100_000)
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"peak-rps", in.PeakRPS}, {"gateway-rps", in.GatewayRPS}, {"scripts-per-shard", in.ScriptsPerShard},
		{"active-keys", in.ActiveKeys}, {"rules-per-key", in.RulesPerKey}, {"bytes-per-bucket", in.BytesPerBucket},
		{"limit-per-minute", in.LimitPerMinute}, {"bytes-per-log-entry", in.BytesPerLogEntry},
		{"bytes-per-call", in.BytesPerCall}, {"busy-key-rps", in.BusyKeyRPS},
	} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return Plan{}, fmt.Errorf("capacity: %s is %v, want a positive number", f.name, f.v)
		}
	}
	if !(in.GatewayBusy > 0 && in.GatewayBusy <= 1) {
		return Plan{}, fmt.Errorf("capacity: gateway-busy is %v, want a share in (0, 1]", in.GatewayBusy)
	}
	if !(in.RedisShare > 0 && in.RedisShare <= 1) {
		return Plan{}, fmt.Errorf("capacity: redis-share is %v, want a share in (0, 1]", in.RedisShare)
	}
	p := Plan{Inputs: in}
	p.Gateways = int(math.Ceil(in.PeakRPS / (in.GatewayRPS * in.GatewayBusy)))
	p.ScriptCalls = in.PeakRPS * in.RedisShare
	p.Shards = int(math.Ceil(p.ScriptCalls / in.ScriptsPerShard))
	room := uint(math.Ceil(float64(p.Shards) * 1.5))
	p.ShardsWithRoom = 1 << bits.Len(room-1)
	p.BucketBytes = in.ActiveKeys * in.RulesPerKey * in.BytesPerBucket
	p.LogBytes = in.ActiveKeys * in.LimitPerMinute * in.BytesPerLogEntry
	p.Bandwidth = p.ScriptCalls * in.BytesPerCall
	p.LeaseBatch = max(1, int(in.BusyKeyRPS/float64(p.Gateways)/10))
	p.BusyKeyCalls = in.BusyKeyRPS / float64(p.LeaseBatch)
	return p, nil
}
