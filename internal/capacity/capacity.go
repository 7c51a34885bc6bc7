// Package capacity sizes a sluice deployment from traffic figures: how many
// gateways, how many Redis shards, how much memory and bandwidth. It is the
// arithmetic of the reference design's "numbers that decide it", as a pure
// function, so `sluice plan` can answer "what if traffic were ten times
// higher" without anyone redoing it by hand.
package capacity

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"

	"github.com/sluice-rl/sluice/limit"
)

// BytesPerKey is the Redis memory of one key's state for one limit, by
// algorithm: the used_memory growth per key measured over a million keys
// shaped as the gateway's (docs/algorithms.md, "k:" keys, 1,000 a minute),
// so it includes the key, the expiry entry and the tables' free slots.
var BytesPerKey = map[limit.Algorithm]float64{
	limit.TokenBucket:   196,
	limit.GCRA:          170,
	limit.SlidingWindow: 202,
	limit.FixedWindow:   202,
}

// BytesPerLogEntry is the Redis memory of one sliding_log entry, from the
// same measurement: 10.6 GB for a million keys of 1,000 entries (Redis
// packs a list's integers into listpacks).
const BytesPerLogEntry = 10.6

// StormFactor is how many times its limit a retry storm asks, as the
// reference design's stress test has it.
const StormFactor = 300

// Inputs are the figures a plan starts from. The zero value of each field
// means the default shown in its comment, which are the reference design's
// assumptions.
type Inputs struct {
	PeakRPS          float64         // API requests a second at peak; 1,000,000
	GatewayRPS       float64         // requests a second one gateway handles; 5,000
	GatewayBusy      float64         // target utilisation of the gateway fleet; 0.6
	RedisShare       float64         // share of requests that call Redis; 1 (0.1 with leases)
	ScriptsPerShard  float64         // limiter scripts a second one shard runs safely; 50,000
	ActiveKeys       float64         // API keys active in an hour; 1,000,000
	RulesPerKey      float64         // limits per key; 2
	Algorithm        limit.Algorithm // how the limits count; token_bucket
	BytesPerBucket   float64         // Redis memory of one key's limit; BytesPerKey[Algorithm]
	LimitPerMinute   float64         // a typical limit, requests a minute; 1,000
	BytesPerLogEntry float64         // Redis memory of one sliding-log entry; the package's BytesPerLogEntry
	BytesPerCall     float64         // request and reply of one script call; 250
	BusyKeyRPS       float64         // the limit of the busiest key, a second; 100,000
	// StormCachedShare is Redis calls per request of a retry storm with
	// the refusal cache, as measured (bench.Capacity); zero means the
	// model: each gateway asks about once per lease lookahead (100 ms)
	// while the key is refused, plus the batches its limit admits.
	StormCachedShare float64
	// DataCentres is how many data centres the gateways run in, each with
	// its own relays; zero means 3.
	DataCentres float64
	// RelayRPS is the lease calls a second one relay answers (from
	// memory for busy keys, a pass-through for quiet ones); zero means
	// 100,000. An assumption to replace with a figure measured on your
	// hardware (sluice bench --relay measures one in-process).
	RelayRPS float64
}

// RelayPlan is what leasing through relays (sluice relay) changes.
type RelayPlan struct {
	// PerDC is the relays a data centre needs: enough for its share of the
	// lease calls, and at least 2 for availability. Total is over every
	// data centre: each relay leases 1/Total of a batch.
	PerDC, Total int
	// Batch is the batch one relay leases for the busiest key: its share
	// of 100 ms of the limit.
	Batch int
	// BusyKeyCalls is the busiest key's Redis calls a second through the
	// relays; BusyKeyLoad is that as a share of one shard.
	BusyKeyCalls, BusyKeyLoad float64
	// CallsPerShard is the Redis calls a second an average shard runs:
	// quiet keys pass through the relays one call each, as before.
	CallsPerShard float64
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
	// shard with leases (without them it is BusyKeyRPS); BusyKeyLoad is
	// that as a share of what one shard runs (ScriptsPerShard). A key
	// lives on one shard, so no number of shards spreads it.
	BusyKeyCalls, BusyKeyLoad float64
	// StormCalls and StormCallsCached are the script calls a second a
	// retry storm at StormFactor times the busiest key's limit costs
	// without the refusal cache (every retry asks) and with it.
	StormCalls, StormCallsCached float64
	// Relay is the plan with a relay per group of gateways.
	Relay RelayPlan
	// Breaks lists what fails without relays at these figures: empty when
	// leasing from Redis directly holds.
	Breaks []string
	// MemoryByAlgorithm is the Redis memory of every key's limits under
	// each algorithm; the sliding log counts LimitPerMinute entries a key.
	MemoryByAlgorithm map[limit.Algorithm]float64
}

// Compute fills in defaults and works out the plan. It refuses inputs that
// cannot describe a deployment, naming the field.
func Compute(in Inputs) (Plan, error) {
	in.PeakRPS = cmp.Or(in.PeakRPS, 1_000_000)
	in.GatewayRPS = cmp.Or(in.GatewayRPS, 5_000)
	in.GatewayBusy = cmp.Or(in.GatewayBusy, 0.6)
	in.RedisShare = cmp.Or(in.RedisShare, 1)
	in.ScriptsPerShard = cmp.Or(in.ScriptsPerShard, 50_000)
	in.ActiveKeys = cmp.Or(in.ActiveKeys, 1_000_000)
	in.RulesPerKey = cmp.Or(in.RulesPerKey, 2)
	in.Algorithm = cmp.Or(in.Algorithm, limit.TokenBucket)
	if !in.Algorithm.Known() {
		return Plan{}, fmt.Errorf("capacity: algorithm %q: want one of %v", in.Algorithm, limit.Algorithms)
	}
	in.LimitPerMinute = cmp.Or(in.LimitPerMinute, 1_000)
	in.BytesPerLogEntry = cmp.Or(in.BytesPerLogEntry, BytesPerLogEntry)
	if in.Algorithm == limit.SlidingLog {
		in.BytesPerBucket = cmp.Or(in.BytesPerBucket, in.LimitPerMinute*in.BytesPerLogEntry)
	} else {
		in.BytesPerBucket = cmp.Or(in.BytesPerBucket, BytesPerKey[in.Algorithm])
	}
	in.BytesPerCall = cmp.Or(in.BytesPerCall, 250)
	in.BusyKeyRPS = cmp.Or(in.BusyKeyRPS, 100_000)
	in.DataCentres = cmp.Or(in.DataCentres, 3)
	in.RelayRPS = cmp.Or(in.RelayRPS, 100_000)
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"peak-rps", in.PeakRPS}, {"gateway-rps", in.GatewayRPS}, {"scripts-per-shard", in.ScriptsPerShard},
		{"active-keys", in.ActiveKeys}, {"rules-per-key", in.RulesPerKey}, {"bytes-per-bucket", in.BytesPerBucket},
		{"limit-per-minute", in.LimitPerMinute}, {"bytes-per-log-entry", in.BytesPerLogEntry},
		{"bytes-per-call", in.BytesPerCall}, {"busy-key-rps", in.BusyKeyRPS},
		{"data-centres", in.DataCentres}, {"relay-rps", in.RelayRPS},
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
	if !(in.StormCachedShare >= 0 && in.StormCachedShare <= 1) {
		return Plan{}, fmt.Errorf("capacity: storm cached share is %v, want a share in [0, 1]", in.StormCachedShare)
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
	p.BusyKeyLoad = p.BusyKeyCalls / in.ScriptsPerShard
	p.StormCalls = StormFactor * in.BusyKeyRPS
	if in.StormCachedShare > 0 {
		p.StormCallsCached = p.StormCalls * in.StormCachedShare
	} else {
		p.StormCallsCached = float64(p.Gateways)*10 + p.BusyKeyCalls
	}
	p.Relay = relayPlan(in, p)
	if p.LeaseBatch <= 1 {
		p.Breaks = append(p.Breaks, fmt.Sprintf("the lease batch of the busiest key is 1 over %d gateways: every one of its requests calls Redis", p.Gateways))
	}
	if p.BusyKeyLoad > 1 {
		p.Breaks = append(p.Breaks, fmt.Sprintf("the busiest key alone needs %.0f%% of its shard (%.0f calls/s); no number of shards spreads one key",
			100*p.BusyKeyLoad, p.BusyKeyCalls))
	}
	p.MemoryByAlgorithm = map[limit.Algorithm]float64{limit.SlidingLog: in.ActiveKeys * in.RulesPerKey * in.LimitPerMinute * in.BytesPerLogEntry}
	for a, b := range BytesPerKey {
		p.MemoryByAlgorithm[a] = in.ActiveKeys * in.RulesPerKey * b
	}
	return p, nil
}

// relayPlan sizes the relays: the lease calls that would reach Redis go
// to the relays instead, spread over the data centres.
func relayPlan(in Inputs, p Plan) RelayPlan {
	var r RelayPlan
	r.PerDC = max(2, int(math.Ceil(p.ScriptCalls/in.DataCentres/in.RelayRPS)))
	r.Total = r.PerDC * int(math.Ceil(in.DataCentres))
	r.Batch = max(1, int(in.BusyKeyRPS/float64(r.Total)/10))
	r.BusyKeyCalls = in.BusyKeyRPS / float64(r.Batch)
	r.BusyKeyLoad = r.BusyKeyCalls / in.ScriptsPerShard
	r.CallsPerShard = p.ScriptCalls / float64(max(p.Shards, 1))
	return r
}
